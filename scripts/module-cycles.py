#!/usr/bin/env python3
"""Import cycles between the top-level modules of each crate.

For every `.rs` file under `<crate>/src`, the references to `crate::…` (and `super::…` that reach the
crate root) are collected and grouped by top-level module: `engine/src/schedule/describe.rs` belongs to
`schedule`, `engine/src/alarm.rs` to `alarm`. Comments, string literals and `#[cfg(test)]` items (and
files named `tests.rs`) are left out: tests may reach anywhere, the layering is about the code that
ships. The crate root (`lib.rs`, `main.rs`) is not a module of the graph.

A cycle is a strongly connected group of two or more modules; for each group the script prints its
modules and the edges inside it with one place each edge is made (file:line), and counts the
elementary cycles (capped). Exit status 1 if any crate has a cycle.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: engine wrapper console)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CYCLE_CAP = 100_000


def strip_code(text):
    """Blank out comments, string and char literals (keeping line breaks, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        m = re.compile(r'b?r(#*)"').match(text, i)
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)
            if m:
                out.append(" " * (m.end() - i))
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def drop_cfg_test(code):
    """Blank out items marked `#[cfg(test)]` (a `mod tests { … }` block or a single item)."""
    out = list(code)
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        j = m.end()
        # The item ends at its matching closing brace, or at `;` if one comes first.
        depth = 0
        while j < len(code):
            ch = code[j]
            if ch == ";" and depth == 0:
                j += 1
                break
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            j += 1
        for k in range(m.start(), j):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)


def group_heads(code, start):
    """The first path segment of each entry of the `{ … }` use-group starting at `start`."""
    depth, j, item_start, heads = 0, start, start + 1, []
    while j < len(code):
        ch = code[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                heads.append(code[item_start:j])
                break
        elif ch == "," and depth == 1:
            heads.append(code[item_start:j])
            item_start = j + 1
        j += 1
    names = []
    for item in heads:
        m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", item)
        if m and m.group(1) != "self":
            names.append(m.group(1))
    return names


def module_of(src, path):
    rel = os.path.relpath(path, src)
    parts = rel.split(os.sep)
    if len(parts) == 1:
        name = parts[0][:-3]
        return None if name in ("lib", "main") else name
    return parts[0]


def crate_graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    files = []
    for dirpath, _, names in os.walk(src):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".rs")]
    modules = {m for m in (module_of(src, f) for f in files) if m}
    edges = {}  # (from, to) -> "file:line"
    for path in sorted(files):
        module = module_of(src, path)
        if module is None or os.path.basename(path) == "tests.rs":
            continue
        with open(path, encoding="utf-8") as fh:
            code = drop_cfg_test(strip_code(fh.read()))
        depth_below_root = len(os.path.relpath(path, src).split(os.sep)) - 1
        if os.path.basename(path) in ("mod.rs",):
            depth_below_root -= 1
        # `super::` from a top-level module file reaches the crate root.
        patterns = [r"\bcrate::"]
        patterns.append(r"\b" + r"super::" * (depth_below_root + 1))
        for pat in patterns:
            for m in re.finditer(pat + r"\s*(\{|[A-Za-z_][A-Za-z0-9_]*)", code):
                target = m.group(1)
                heads = group_heads(code, m.start(1)) if target == "{" else [target]
                line = code.count("\n", 0, m.start()) + 1
                for head in heads:
                    if head in modules and head != module:
                        edges.setdefault((module, head), f"{os.path.relpath(path, ROOT)}:{line}")
    return sorted(modules), edges


def sccs(nodes, adj):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in nodes:
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def count_cycles(comp, adj):
    """Elementary cycles inside one strongly connected group (each counted once, from its least node)."""
    order = {v: i for i, v in enumerate(comp)}
    count = 0
    for s in comp:
        stack = [(s, iter(sorted(adj.get(s, ()))))]
        on_path = {s}
        while stack:
            v, it = stack[-1]
            for w in it:
                if w not in order or order[w] < order[s]:
                    continue
                if w == s:
                    count += 1
                    if count >= CYCLE_CAP:
                        return count
                elif w not in on_path:
                    on_path.add(w)
                    stack.append((w, iter(sorted(adj.get(w, ())))))
                    break
            else:
                stack.pop()
                on_path.discard(v)
    return count


def main(argv):
    crates = argv or ["engine", "wrapper", "console"]
    found = False
    for crate in crates:
        crate_dir = crate if os.path.isabs(crate) else os.path.join(ROOT, crate)
        nodes, edges = crate_graph(crate_dir)
        adj = {}
        for a, b in edges:
            adj.setdefault(a, set()).add(b)
        groups = sccs(nodes, adj)
        total = sum(count_cycles(g, adj) for g in groups)
        capped = "+" if total >= CYCLE_CAP else ""
        print(f"{crate}: {len(nodes)} modules, {len(edges)} edges, "
              f"{len(groups)} cyclic groups, {total}{capped} elementary cycles")
        for g in groups:
            found = True
            print(f"  group of {len(g)}: {' '.join(g)}")
            for (a, b), where in sorted(edges.items()):
                if a in g and b in g:
                    print(f"    {a} -> {b}   ({where})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
