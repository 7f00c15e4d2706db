"""my_job.py: three continuous queries over the built-in bursty source for 10 seconds of stream
from Spark's first micro-batch, a line of progress each second, then the same queries on a
finite DataFrame. Run it with any Python that has sparkqos installed. Spark's start-up comes
before the 10 s, and takes the longer the busier the machine."""

import datetime as dt
import shutil
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqos
from sparkqos import sources

print("starting Spark …", flush=True)
spark = (
    SparkSession.builder.master("local[2]")
    .appName("my_job")
    .config("spark.ui.showConsoleProgress", "false")  # the progress lines below instead of stage bars
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def fire(df):  # the readings of a fire: hot
    return df.where(F.col("temperature") > 55).select("sensor_id", "location", "temperature", "ts")


def anomaly(df):  # humid readings
    level = F.when(F.col("humidity") > 72, "high").otherwise("raised")
    return df.where(F.col("humidity") > 68).select("sensor_id", level.alias("level"), (F.col("humidity") / 100).alias("h"), "ts")


def extremes(df):  # cold or dry readings, one branch each
    return df.where(F.col("temperature") < 17).unionByName(df.where(F.col("humidity") < 42))


queries = {"fire": fire, "anomaly": anomaly, "extremes": extremes}
shutil.rmtree("/tmp/my_job", ignore_errors=True)  # start afresh (keep it to resume from the checkpoint)
print("registering sparkqos's sources (a first task checks Spark's Python workers) …", flush=True)
sources.register(spark)  # sparkqos.bursty / .poisson / .replay
df = spark.readStream.format("sparkqos.bursty").options(rate=4000, offScale=8, seed=7).load()
print("compiling the queries …", flush=True)
handle = sparkqos.stream(
    df,
    queries,
    classes={"fire": "H", "anomaly": "C", "extremes": "N"},
    priorities={"H": 6, "C": 3, "N": 1},
    strategy="cqc",
    checkpoint="/tmp/my_job/checkpoint",
    output="/tmp/my_job/out",
)
query = handle.start()  # a real StreamingQuery
began = None
while query.isActive and (began is None or time.time() - began < 10):  # 10 s from the first micro-batch
    query.awaitTermination(1)
    p = handle.lastProgress  # sparkqos's progress record of the last trigger (None before the first)
    if p is None:
        print("waiting for Spark's first micro-batch …", flush=True)
        continue
    began = began or time.time()
    p99 = {q["query"]: f"{q['delayP99_s'] * 1000:.0f} ms" for q in p["queries"] if q["delayP99_s"] == q["delayP99_s"]}
    print(f"batch {p['batchId']:>3}: {p['numInputRows']:>5} rows in, {int(p['queuedRows']):>6} queued, p99 {p99}", flush=True)
handle.stop()  # stops the query between two triggers
print(int(handle.lastProgress["queuedRows"]), "rows left queued (kept in the checkpoint)")
for name in queries:  # the outputs: Parquet files, one folder per query
    print(f"{name}: {spark.read.parquet(f'/tmp/my_job/out/outputs/query={name}').count()} rows")

# The same transforms on a finite DataFrame, through the executor: {query: pyarrow.Table}
readings = spark.createDataFrame(
    [
        (1, "zone-1", 71.5, 12.0, dt.datetime(2026, 1, 1, 12, 0, 0)),
        (2, "zone-2", 16.2, 75.0, dt.datetime(2026, 1, 1, 12, 0, 1)),
        (3, "zone-3", 21.0, 40.5, dt.datetime(2026, 1, 1, 12, 0, 2)),
    ],
    "sensor_id int, location string, temperature double, humidity double, ts timestamp",
)
readings.write.mode("overwrite").parquet("/tmp/my_job/sensors.parquet")
tables = sparkqos.run(spark.read.parquet("/tmp/my_job/sensors.parquet"), queries, strategy="chain")
print({name: table.num_rows for name, table in tables.items()})  # {'fire': 1, 'anomaly': 1, 'extremes': 3}
spark.stop()
