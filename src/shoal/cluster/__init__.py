"""Shoal cluster: grouping decisions shared by nodes, and the links between them."""
