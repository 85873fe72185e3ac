#!/usr/bin/env python3
"""Summarise a dhat heap profile of the operator (dhat-heap.json, written by a build with
`--features heap-profile`; see docs/performance.md).

Usage: bench/heap-summary.py dhat-heap.json [gb|eb] [--top N]
  gb: bytes live at the global peak (default); eb: bytes live at exit.
Prints the live bytes by what holds them (first matching rule over the allocation's stack),
then the N largest allocation sites with their stacks (allocator and executor frames left out).
"""
import collections
import json
import re
import sys

RULES = [
    ("hyper read buffers", r"hyper::proto::h1::io::Buffered.*poll_read_from_io"),
    ("hyper write buffers", r"hyper::proto::h1::io::WriteBuf"),
    ("watch line buffers", r"framed_impl::ReadFrame"),
    ("kube predicate caches", r"predicate::Predicate"),
    ("node cache (Node clone)", r"v1::node::Node as core::clone::Clone"),
    ("job records", r"JobView::from_job|controller::watch::streams::job_record|record_cache::Writer"),
    ("event recorder", r"controller::write::event_series"),
    ("event queue", r"controller::write::event_queue"),
    ("skyhook copies", r"crd::skyhook::Skyhook as core::clone::Clone"),
    ("a pass: plan", r"skyhook::plan::"),
    ("job creations", r"skyhook::controller::write::job_creations"),
    ("a pass: writes", r"skyhook::controller::write::"),
    ("hyper client channels", r"mpsc::block::Block|hyper_util::client"),
    ("rustls", r"rustls"),
    ("watch decoding (inlined: mostly cache records)", r"watcher|TryFlatten|with_guard"),
]

SKIP = ("alloc::", "<alloc::", "dhat", "<dhat", "core::", "<core::", "__rust", "[root]",
        "std::rt", "std::sys", "<std", "std::panic", "tokio::runtime", "<tracing",
        "<futures_util::stream", "futures_util::stream", "<kube_runtime::utils::OnComplete")


def short(frame):
    frame = re.sub(r"^0x[0-9a-f]+: ", "", frame)
    frame = re.sub(r" \(.*\)$", "", frame)
    return re.sub(r"::h[0-9a-f]{16}", "", frame)[:120]


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, rest = argv[0], argv[1:]
    mode, top = "gb", 15
    while rest:
        if rest[0] == "--top" and len(rest) > 1:
            top, rest = int(rest[1]), rest[2:]
        elif rest[0] in ("gb", "eb"):
            mode, rest = rest[0], rest[1:]
        else:
            print(f"unknown argument {rest[0]!r}\n\n{__doc__.strip()}", file=sys.stderr)
            return 2
    with open(path) as f:
        profile = json.load(f)
    frames = profile["ftbl"]
    sites = profile["pps"]
    size, count = collections.Counter(), collections.Counter()
    for site in sites:
        stack = "\n".join(frames[i] for i in site["fs"])
        name = next((n for n, rx in RULES if re.search(rx, stack)), "other")
        size[name] += site.get(mode, 0)
        count[name] += site.get(mode + "k", 0)
    print(f"live ({mode}): {sum(size.values()) / 2**20:.2f} MiB")
    for name, n in size.most_common():
        print(f"{n / 2**20:8.2f} MiB {count[name]:8d} blocks  {name}")
    print(f"\nthe {top} largest allocation sites:")
    for site in sorted(sites, key=lambda s: -s.get(mode, 0))[:top]:
        stack = [short(frames[i]) for i in site["fs"]]
        stack = [f for f in stack if not f.startswith(SKIP)]
        print(f"{site.get(mode, 0) / 2**20:8.2f} MiB {site.get(mode + 'k', 0):8d} blocks")
        for f in stack[:8]:
            print(f"      {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
