"""Runs a command and prints its wall time and the peak of the summed RSS of it and all its
descendants (HTA parses in a process pool, whose memory a plain ru_maxrss misses)."""
import subprocess, sys, time
import psutil
start = time.perf_counter()
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
root = psutil.Process(process.pid)
peak = 0
while process.poll() is None:
    try:
        total = root.memory_info().rss + sum(child.memory_info().rss
                                             for child in root.children(recursive=True))
        peak = max(peak, total)
    except psutil.Error:
        pass
    time.sleep(0.05)
print(f"{time.perf_counter() - start:.2f} s, {peak / 2**20:.0f} MB" + (f" (exit {process.returncode})" if process.returncode else ""))
