"""Side-by-side benchmarks: Shoal against ActiveMQ 5.17 and RabbitMQ over STOMP."""
