"""Results of a study as plain data, loaded from its storage, and the recommendation drawn from them."""
