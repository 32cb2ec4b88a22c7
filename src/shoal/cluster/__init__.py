"""Shoal cluster: the grouping decisions shared by nodes, pure (no I/O).

The server drives them; its ZooKeeper client and node-to-node link are
:mod:`shoal.server.cluster`."""
