"""HolisticTraceAnalysis on a folder of per-rank Chrome traces: load them and compute the
temporal breakdown (idle / compute / non-compute per rank), printing how long each part took.
usage: hta_temporal_breakdown.py TRACE_DIR"""
import sys
import time

start = time.perf_counter()
from hta.trace_analysis import TraceAnalysis  # noqa: E402  (its import time is reported)

imported = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
frame = analysis.get_temporal_breakdown(visualize=False)
done = time.perf_counter()
print(f"HTA: {len(frame)} ranks; import {imported - start:.2f} s, load {loaded - imported:.2f} s, "
      f"temporal breakdown {done - loaded:.2f} s")
