"""Turning a pipeline description into runnable training objects."""
