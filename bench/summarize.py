#!/usr/bin/env python3
"""bench/run's bookkeeping: one JSON row per run, the printed table, the JSON result file.

  summarize.py row ...        one row (arguments from bench/run) on stdout
  summarize.py table [--last] rows (JSON lines) on stdin -> the table (--last: only the last row)
  summarize.py json           rows on stdin -> one JSON document with the machine and settings
  summarize.py plugin         "<tool> <command> <seconds> <peak KiB>" lines -> JSON
"""
import argparse
import json
import os
import platform
import subprocess
import sys

BENCH_USER = "skyhook-bench-operator"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
# stages per package in the bench's Skyhook: apply and config
STAGES_PER_PACKAGE = 2


def audit_counts(path, first, last):
    counts = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i < first:
                continue
            if i >= last:
                break
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("user", {}).get("username") != BENCH_USER:
                continue
            ref = e.get("objectRef") or {}
            resource = ref.get("resource", "?")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            key = f'{e.get("verb", "?")} {resource}'
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def row(a):
    r = {
        "operator": a.operator,
        "nodes": a.nodes,
        "packages": a.packages,
        "percent": a.percent,
        "stage_seconds": a.stage_seconds,
        "rollout_s": round(float(a.wall), 2),
        "status": a.status,
        "peak_mib": None,
        "cpu_s": None,
    }
    if a.proc.strip():
        kib, cpu = a.proc.split()
        r["peak_mib"] = round(int(kib) / 1024, 1)
        r["cpu_s"] = float(cpu)
    reqs = audit_counts(a.audit, int(a.audit_lines[0]), int(a.audit_lines[1]))
    r["requests"] = reqs
    r["requests_total"] = sum(reqs.values())
    writes = sum(
        v for k, v in reqs.items()
        if k.split()[0] in WRITE_VERBS and not k.split()[1].startswith("events")
    )
    r["writes"] = writes
    r["writes_per_stage"] = round(writes / (a.nodes * a.packages * STAGES_PER_PACKAGE), 2)
    try:
        with open(a.observed, encoding="utf-8") as f:
            r["observed"] = json.load(f)
    except (OSError, ValueError) as e:
        r["observed"] = {"error": str(e)}
    r["plugin"] = json.loads(a.plugin)
    if a.ticks:
        before, after = (dict(kv.split("=") for kv in t.split()) for t in a.ticks[:2])
        hz = float(a.ticks[2])
        r["cluster_cpu_s"] = {
            k: round((float(after[k]) - float(before.get(k, 0))) / hz, 1) for k in after
        }
    print(json.dumps(r, sort_keys=False))


def q(obs, key):
    v = (obs or {}).get(key)
    if not v:
        return "-"
    return f'{v["p50"]:.1f}/{v["p99"]:.1f}'


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(rows, last):
    floors = {(r["nodes"], r["percent"]): r["rollout_s"] for r in rows if r["operator"] == "floor"}
    shown = rows[-1:] if last else rows
    if not last:
        print(f'{"operator":<10} {"nodes":<6} {"pkgs":<4} {"budget":<6} {"rollout_s":<9} {"floor_x":<7} '
              f'{"peak_MiB":<9} {"cpu_s":<7} {"writes/stg":<10} {"next_p50/p99":<13} '
              f'{"state_p50/p99":<13} {"compl_p50/p99":<13}')
    for r in shown:
        fl = floors.get((r["nodes"], r["percent"]))
        ratio = r["rollout_s"] / fl if fl else None
        obs = r.get("observed")
        status = "" if r["status"] == "complete" else f'  ({r["status"]})'
        print(f'{r["operator"]:<10} {r["nodes"]:<6} {r["packages"]:<4} {str(r["percent"]) + "%":<6} '
              f'{r["rollout_s"]:<9.1f} {fmt(ratio, "<7.2f")} {fmt(r["peak_mib"], "<9.1f")} '
              f'{fmt(r["cpu_s"], "<7.1f")} {r["writes_per_stage"]:<10.2f} {q(obs, "next_stage_delay_s"):<13} '
              f'{q(obs, "node_state_lag_s"):<13} {q(obs, "complete_nodes_lag_s"):<13}{status}')
        stall = (obs or {}).get("longest_stall")
        if stall:
            print(f'  longest stall: {stall["seconds"]:.1f} s from {stall["from_s"]:.0f} s with no stage '
                  f'finishing ({stall["waiting_for_pod"]} waiting for a pod, {stall["running"]} running); '
                  f'created -> pod p50/p99 {q(obs, "start_delay_s")}')
        if r.get("cluster_cpu_s"):
            parts = ", ".join(f"{k} {v:.1f}" for k, v in r["cluster_cpu_s"].items())
            print(f"  cpu s during the rollout: {parts}")
        if r.get("plugin"):
            for p in r["plugin"]:
                print(f'  plugin {p["tool"]:<9} node {p["command"]:<6} {p["seconds"]:.2f} s  {p["peak_mib"]:.1f} MiB')


def machine():
    def run(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return None
    mem = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            mem = f.readline().split()[1]
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "mem_kib": int(mem) if mem else None,
        "kernel": platform.release(),
        "commit": run("git", "rev-parse", "--short", "HEAD"),
        "controller_manager": {
            "kube_api_qps": int(os.environ.get("KCM_QPS", "200")),
            "kube_api_burst": int(os.environ.get("KCM_BURST", "400")),
            "concurrent_job_syncs": int(os.environ.get("KCM_JOB_SYNCS", "5")),
        },
    }


def plugin(lines):
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) != 4:
            continue
        tool, cmd, secs, kib = parts
        try:
            out.append({"tool": tool, "command": cmd, "seconds": float(secs),
                        "peak_mib": round(int(kib) / 1024, 1)})
        except ValueError:
            continue
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("row")
    r.add_argument("--operator", required=True)
    r.add_argument("--nodes", type=int, required=True)
    r.add_argument("--packages", type=int, required=True)
    r.add_argument("--percent", type=int, required=True)
    r.add_argument("--stage-seconds", type=float, required=True)
    r.add_argument("--wall", required=True)
    r.add_argument("--status", default="")
    r.add_argument("--proc", default="")
    r.add_argument("--audit", required=True)
    r.add_argument("--audit-lines", nargs=2, required=True)
    r.add_argument("--observed", required=True)
    r.add_argument("--plugin", default="null")
    r.add_argument("--ticks", nargs=3, help="cluster_ticks before, after, and ticks per second")
    t = sub.add_parser("table")
    t.add_argument("--last", action="store_true")
    sub.add_parser("json")
    sub.add_parser("plugin")
    a = p.parse_args()
    if a.cmd == "row":
        row(a)
    elif a.cmd == "plugin":
        plugin(sys.stdin)
    else:
        rows = [json.loads(line) for line in sys.stdin if line.strip()]
        if a.cmd == "table":
            table(rows, a.last)
        else:
            print(json.dumps({"machine": machine(), "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
