"""Measuring a training loop: timing, memory, and the machine it ran on."""
