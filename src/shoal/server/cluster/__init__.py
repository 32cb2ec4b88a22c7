"""The cluster's I/O: the ZooKeeper client (``zookeeper``), the node-to-node
link (``link``), the node that wires them to the server (``node``) and a
ZooKeeper server for development and tests (``zkserver``). The decisions they
feed live in :mod:`shoal.cluster`, which does no I/O."""
