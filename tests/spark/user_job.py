"""A Structured Streaming job written as a user would, from docs/spark.md: read a
log queue, keep some symbols, upper-case the body, write to another queue.

    python user_job.py spark://127.0.0.1:PORT http://127.0.0.1:8161 CHECKPOINT_DIR

tests/spark/test_cluster.py runs it as the driver of a standalone cluster.
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import shoal.spark

master, url, checkpoint = sys.argv[1:4]
spark = (
    SparkSession.builder.master(master)
    .appName("user-job")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "4")
    .getOrCreate()
)
shoal.spark.register(spark)

orders = (
    spark.readStream.format("shoal")
    .option("url", url)
    .option("queue", "ticks")
    .option("maxOffsetsPerTrigger", 400)
    .load()
)
kept = orders.where(F.col("group_id") < "S5").select(
    "group_id", "group_seq", F.upper(F.col("body").cast("string")).alias("body")
)
query = (
    kept.writeStream.format("shoal")
    .option("url", url)
    .option("destination", "/queue/kept")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
print("user job done", flush=True)
spark.stop()
