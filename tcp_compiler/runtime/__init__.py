"""Host-side runtime pieces that run around the compiled graph, such as turning logits into tokens."""
