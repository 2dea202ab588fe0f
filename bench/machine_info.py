"""The machine a benchmark ran on, for its result file."""
import os
import platform


def machine():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cores": os.cpu_count(), "host": platform.node(),
            "kernel": platform.release()}
