"""Parsing for codebase search: chunks per language, collapsed classes, line-window fallbacks,
coverage and size bounds (hypothesis), symbol tags, the shared language registry, PageRank and
the repo map on real installed packages.

Run: .venv/bin/python -m pytest tests/agent/test_retrieval_parsing.py -q
"""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.retrieval import languages
from agent.retrieval.chunking import MAX_FILE_CHARS, Chunk, chunk_text
from agent.retrieval.repomap import pagerank, rank_definitions, repo_map
from agent.retrieval.tags import Tag, file_tags
from agent.tools import lints


def package_sources(name: str, pattern: str = "*.py") -> dict[str, str]:
    """An installed package's source files by "name/relative/path.py" (skips if not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{name} is not installed")
    root = Path(spec.origin).parent
    return {f"{name}/{p.relative_to(root).as_posix()}": p.read_text() for p in sorted(root.glob(pattern))}


# ---- small realistic sources, one per language ------------------------------------------------

PY = '''\
"""Job queue: submit callables, run them on worker threads."""

from __future__ import annotations

import threading
from collections import deque

MAX_WORKERS = 4


def _now() -> float:
    import time

    return time.monotonic()


class Job:
    """One unit of work."""

    def __init__(self, fn, *args):
        self.fn = fn
        self.args = args
        self.result = None

    def run(self):
        self.result = self.fn(*self.args)
        return self.result


class Queue:
    def __init__(self, workers: int = MAX_WORKERS):
        self.jobs: deque[Job] = deque()
        self.lock = threading.Lock()
        self.workers = workers

    @property
    def size(self) -> int:
        with self.lock:
            return len(self.jobs)

    def submit(self, fn, *args) -> Job:
        job = Job(fn, *args)
        with self.lock:
            self.jobs.append(job)
        return job

    def drain(self) -> list[object]:
        results = []
        while self.jobs:
            with self.lock:
                job = self.jobs.popleft()
            results.append(job.run())
        return results


if __name__ == "__main__":
    q = Queue()
    q.submit(print, "hello")
    q.drain()
'''

JS = """\
import { readFile } from "node:fs/promises";
import path from "node:path";

const DEFAULT_PORT = 8080;

/**
 * Load the JSON config next to the script.
 */
export async function loadConfig(dir) {
  const raw = await readFile(path.join(dir, "config.json"), "utf8");
  const config = JSON.parse(raw);
  if (!config.port) {
    config.port = DEFAULT_PORT;
  }
  return config;
}

export class Server {
  constructor(config) {
    this.config = config;
    this.routes = new Map();
  }

  route(method, pattern, handler) {
    this.routes.set(`${method} ${pattern}`, handler);
    return this;
  }

  async handle(request) {
    const handler = this.routes.get(`${request.method} ${request.url}`);
    if (!handler) {
      return { status: 404, body: "not found" };
    }
    return handler(request);
  }
}

export const createServer = (config) => new Server(config);
"""

TS = """\
import type { Item } from "./types";

export interface Store<T> {
  get(id: string): T | undefined;
  put(id: string, value: T): void;
}

export type Listener = (id: string) => void;

export class MemoryStore<T> implements Store<T> {
  private items = new Map<string, T>();
  private listeners: Listener[] = [];

  get(id: string): T | undefined {
    return this.items.get(id);
  }

  put(id: string, value: T): void {
    this.items.set(id, value);
    for (const listener of this.listeners) {
      listener(id);
    }
  }
}

export namespace Stores {
  export function memory<T>(): Store<T> {
    return new MemoryStore<T>();
  }
}

export function countItems(store: Store<Item>, ids: string[]): number {
  return ids.filter((id) => store.get(id) !== undefined).length;
}
"""

GO = """\
package cache

import (
	"sync"
	"time"
)

// Entry is one cached value with its expiry.
type Entry struct {
	Value   string
	Expires time.Time
}

// Cache is a map guarded by a mutex.
type Cache struct {
	mu      sync.Mutex
	entries map[string]Entry
}

// New returns an empty cache.
func New() *Cache {
	return &Cache{entries: make(map[string]Entry)}
}

// Get returns the value for key if it has not expired.
func (c *Cache) Get(key string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.After(e.Expires) {
		return "", false
	}
	return e.Value, true
}

// Put stores a value for ttl.
func (c *Cache) Put(key, value string, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = Entry{Value: value, Expires: time.Now().Add(ttl)}
}
"""

RUST = """\
use std::fmt;

/// A point in the plane.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Self {
        Point { x, y }
    }

    pub fn distance(&self, other: &Point) -> f64 {
        let dx = self.x - other.x;
        let dy = self.y - other.y;
        (dx * dx + dy * dy).sqrt()
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "({}, {})", self.x, self.y)
    }
}

pub trait Shape {
    fn area(&self) -> f64;
    fn name(&self) -> String {
        String::from("shape")
    }
}

mod tests {
    use super::*;

    #[test]
    fn distance_is_symmetric() {
        let a = Point::new(0.0, 0.0);
        let b = Point::new(3.0, 4.0);
        assert_eq!(a.distance(&b), b.distance(&a));
    }
}
"""

JAVA = """\
package com.example.queue;

import java.util.ArrayDeque;
import java.util.Deque;

/**
 * A bounded FIFO queue.
 */
public class Queue<T> {
    private final Deque<T> items = new ArrayDeque<>();
    private final int capacity;

    public Queue(int capacity) {
        this.capacity = capacity;
    }

    /** Adds an item; returns false when full. */
    public boolean offer(T item) {
        if (items.size() >= capacity) {
            return false;
        }
        items.addLast(item);
        return true;
    }

    public T poll() {
        return items.pollFirst();
    }

    public int size() {
        return items.size();
    }
}

interface Sink<T> {
    void accept(T item);
}
"""

C = """\
#include <stdlib.h>
#include <string.h>

#define INITIAL_CAPACITY 16

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} Buffer;

/* Create an empty buffer. */
Buffer *buffer_new(void) {
    Buffer *b = malloc(sizeof(Buffer));
    b->data = malloc(INITIAL_CAPACITY);
    b->len = 0;
    b->cap = INITIAL_CAPACITY;
    return b;
}

static void buffer_grow(Buffer *b, size_t need) {
    while (b->cap < need) {
        b->cap *= 2;
    }
    b->data = realloc(b->data, b->cap);
}

void buffer_append(Buffer *b, const char *s, size_t n) {
    buffer_grow(b, b->len + n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
}
"""

CPP = """\
#include <vector>
#include <stdexcept>

namespace linalg {

class Matrix {
 public:
  Matrix(int rows, int cols) : rows_(rows), cols_(cols), data_(rows * cols) {}

  double& at(int r, int c) {
    if (r < 0 || r >= rows_ || c < 0 || c >= cols_) {
      throw std::out_of_range("index");
    }
    return data_[r * cols_ + c];
  }

  Matrix multiply(const Matrix& other) const;

 private:
  int rows_, cols_;
  std::vector<double> data_;
};

Matrix Matrix::multiply(const Matrix& other) const {
  Matrix out(rows_, other.cols_);
  for (int i = 0; i < rows_; ++i)
    for (int j = 0; j < other.cols_; ++j)
      for (int k = 0; k < cols_; ++k)
        out.data_[i * other.cols_ + j] += data_[i * cols_ + k] * other.data_[k * other.cols_ + j];
  return out;
}

}  // namespace linalg
"""

LUA = """\
local M = {}

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

--- Split a string on a separator.
function M.split(s, sep)
  local parts = {}
  for piece in string.gmatch(s, "([^" .. sep .. "]+)") do
    table.insert(parts, trim(piece))
  end
  return parts
end

function M:describe()
  return "util module with " .. #self.names .. " names"
end

M.join = function(parts, sep)
  return table.concat(parts, sep)
end

return M
"""

MD = """\
Intro text before any heading.

# Install

Run the installer:

```sh
# not a heading
pip install composer
```

## From source

Clone and build.

# Usage

Start the server.

Configuration
-------------

Edit the file.
"""

SOURCES = {"jobs.py": PY, "app.js": JS, "store.ts": TS, "cache.go": GO, "shapes.rs": RUST,
           "Queue.java": JAVA, "buffer.c": C, "matrix.cpp": CPP, "util.lua": LUA, "guide.md": MD}

EXPECTED_CHUNKS = {  # (start, end, kind, symbol) at max_chars=250 (Markdown: 60)
    "jobs.py": [(1, 8, "module", None), (11, 14, "function", "_now"), (17, 27, "class", "Job"),
                (30, 53, "class", "Queue"), (31, 34, "method", "Queue.__init__"),
                (36, 39, "method", "Queue.size"), (41, 45, "method", "Queue.submit"),
                (47, 53, "method", "Queue.drain"), (56, 59, "module", None)],
    "app.js": [(1, 4, "module", None), (6, 13, "function", "loadConfig"),
               (11, 16, "function", "loadConfig"), (18, 36, "class", "Server"),
               (19, 22, "method", "Server.constructor"), (24, 27, "method", "Server.route"),
               (29, 35, "method", "Server.handle"), (38, 38, "function", "createServer")],
    "store.ts": [(1, 1, "module", None), (3, 6, "class", "Store"), (8, 8, "class", "Listener"),
                 (10, 24, "class", "MemoryStore"), (14, 16, "method", "MemoryStore.get"),
                 (18, 23, "method", "MemoryStore.put"), (26, 26, "module", None),
                 (27, 30, "function", "Stores.memory"), (32, 34, "function", "countItems")],
    "cache.go": [(1, 6, "module", None), (8, 12, "class", "Entry"), (14, 18, "class", "Cache"),
                 (20, 23, "function", "New"), (25, 32, "method", "Cache.Get"),
                 (30, 34, "method", "Cache.Get"), (36, 41, "method", "Cache.Put")],
    "shapes.rs": [(1, 1, "module", None), (3, 8, "class", "Point"), (10, 20, "class", "Point"),
                  (22, 26, "class", "Point"), (28, 33, "class", "Shape"), (35, 36, "module", None),
                  (38, 44, "function", "tests.distance_is_symmetric")],
    "Queue.java": [(1, 4, "module", None), (6, 24, "class", "Queue"), (13, 15, "method", "Queue.Queue"),
                   (17, 24, "method", "Queue.offer"), (26, 33, "class", "Queue"),
                   (26, 28, "method", "Queue.poll"), (30, 32, "method", "Queue.size"),
                   (35, 37, "class", "Sink")],
    "buffer.c": [(1, 4, "module", None), (6, 10, "class", "Buffer"), (12, 19, "function", "buffer_new"),
                 (21, 26, "function", "buffer_grow"), (28, 32, "function", "buffer_append")],
    "matrix.cpp": [(1, 4, "module", None), (6, 22, "class", "linalg.Matrix"),
                   (8, 8, "method", "linalg.Matrix.Matrix"), (10, 15, "method", "linalg.Matrix.at"),
                   (24, 28, "method", "linalg.Matrix.multiply"), (26, 31, "method", "linalg.Matrix.multiply"),
                   (33, 33, "module", None)],
    "util.lua": [(1, 1, "module", None), (3, 5, "function", "trim"), (7, 14, "function", "M.split"),
                 (16, 18, "method", "M.describe"), (20, 22, "function", "M.join"), (24, 24, "module", None)],
    "guide.md": [(1, 1, "section", None), (3, 8, "section", "Install"), (7, 10, "section", "Install"),
                 (12, 14, "section", "From source"), (16, 18, "section", "Usage"),
                 (20, 23, "section", "Configuration")],
}


def check_invariants(path: str, text: str, chunks: list[Chunk], max_chars: int) -> None:
    """Ranges valid, every non-blank line covered, no chunk over max_chars, and chunk text is
    the source lines (collapsed classes and pieces of long lines aside)."""
    lines = text.split("\n")
    covered = set()
    for c in chunks:
        assert c.path == path
        assert 1 <= c.start_line <= c.end_line <= len(lines), c
        assert len(c.text) <= max_chars, (c.start_line, c.end_line, len(c.text))
        assert c.text.strip(), c
        covered.update(range(c.start_line, c.end_line + 1))
        source = "\n".join(lines[c.start_line - 1 : c.end_line])
        if c.kind != "class" and c.start_line != c.end_line:
            assert c.text == source, c
    missing = [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered]
    assert not missing, f"{path}: lines {missing[:10]} in no chunk"


# ---- chunking ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOURCES))
def test_chunk_boundaries_per_language(name: str) -> None:
    max_chars = 60 if name.endswith(".md") else 250
    chunks = chunk_text(name, SOURCES[name], max_chars=max_chars)
    assert [(c.start_line, c.end_line, c.kind, c.symbol) for c in chunks] == EXPECTED_CHUNKS[name]
    check_invariants(name, SOURCES[name], chunks, max_chars)


def test_collapsed_classes_keep_signatures_per_language() -> None:
    by = {name: {(c.kind, c.symbol, c.start_line): c.text for c in chunk_text(name, text, max_chars=250)}
          for name, text in SOURCES.items()}
    assert by["jobs.py"][("class", "Queue", 30)] == (
        "class Queue:\n"
        "    def __init__(self, workers: int = MAX_WORKERS): ...\n"
        "    @property\n"
        "    def size(self) -> int: ...\n"
        "    def submit(self, fn, *args) -> Job: ...\n"
        "    def drain(self) -> list[object]: ...")
    assert by["app.js"][("class", "Server", 18)] == (
        "export class Server {\n  constructor(config) { ... }\n  route(method, pattern, handler) { ... }\n"
        "  async handle(request) { ... }\n}")
    matrix = by["matrix.cpp"][("class", "linalg.Matrix", 6)]
    assert "  double& at(int r, int c) { ... }" in matrix and "throw" not in matrix
    assert "  Matrix multiply(const Matrix& other) const;" in matrix and matrix.endswith("};")
    java = by["Queue.java"]
    assert java[("class", "Queue", 6)].endswith("    public boolean offer(T item) { ... }")
    assert java[("class", "Queue", 26)] == "    public T poll() { ... }\n    public int size() { ... }\n}"


def test_small_definitions_merge_with_their_neighbours() -> None:
    chunks = chunk_text("jobs.py", PY, max_chars=1500)  # Job (236 chars) is under 1500 // 5: merged
    assert [(c.start_line, c.end_line, c.kind, c.symbol) for c in chunks] == [
        (1, 27, "module", None), (30, 53, "class", "Queue"), (56, 59, "module", None)]
    assert chunks[1].text == "\n".join(PY.split("\n")[29:53])
    go = chunk_text("cache.go", GO, max_chars=1500)
    assert len(go) == 1 and go[0].kind == "module" and go[0].symbol is None


BIG_CLASS = '''\
import json


class Repository:
    """Records stored in a JSON file, indexed by key."""

    DEFAULT_LIMIT = 100

    class Record:
        def __init__(self, key, value):
            self.key, self.value = key, value

    def __init__(self, path):
        self.path = path
        self.records = {}

    def get(self, key, default=None):
        record = self.records.get(key)
        return default if record is None else record.value

    def put(self, key, value):
        self.records[key] = self.Record(key, value)

    def compact(self, limit=DEFAULT_LIMIT):
        """Drop the oldest records beyond `limit`, then rewrite the file."""
''' + "".join(f'''\
        if len(self.records) > limit and "{i}" in self.records:
            del self.records["{i}"]  # step {i}: the oldest key goes first
''' for i in range(12)) + '''\
        with open(self.path, "w") as f:
            json.dump({k: r.value for k, r in self.records.items()}, f)
'''


def test_big_python_class_is_collapsed_and_its_methods_split() -> None:
    chunks = chunk_text("repo.py", BIG_CLASS, max_chars=600)
    check_invariants("repo.py", BIG_CLASS, chunks, 600)
    lines = BIG_CLASS.split("\n")
    summary = [(c.start_line, c.end_line, c.kind, c.symbol) for c in chunks]
    end = len(lines) - 1
    assert summary[:7] == [
        (1, 1, "module", None), (4, end, "class", "Repository"), (9, 11, "class", "Repository.Record"),
        (13, 15, "method", "Repository.__init__"), (17, 19, "method", "Repository.get"),
        (21, 22, "method", "Repository.put"), (24, summary[6][1], "method", "Repository.compact")]
    collapsed = chunks[1].text
    assert collapsed == (
        'class Repository:\n    """Records stored in a JSON file, indexed by key."""\n'
        "    DEFAULT_LIMIT = 100\n"
        "    class Record:\n        def __init__(self, key, value):\n"
        "            self.key, self.value = key, value\n"
        "    def __init__(self, path): ...\n    def get(self, key, default=None): ...\n"
        "    def put(self, key, value): ...\n    def compact(self, limit=DEFAULT_LIMIT): ...")
    compact = [c for c in chunks if c.symbol == "Repository.compact"]
    assert len(compact) >= 3 and all(c.kind == "method" and len(c.text) <= 600 for c in compact)
    assert compact[0].start_line == 24 and compact[-1].end_line == end
    for a, b in itertools.pairwise(compact):
        assert 0 < a.end_line - b.start_line + 1 <= 3  # windows overlap by a few lines
    assert chunks[4].text == "\n".join(lines[16:19])
    assert chunks[1].header == "repo.py: Repository (class)"
    assert chunks[0].header == "repo.py"


def test_nested_big_classes_recurse() -> None:
    inner = "".join(f"        def m{i}(self):\n            return {i} * {i}\n\n" for i in range(8))
    text = f"class Outer:\n    class Inner:\n{inner}    def run(self):\n        return 1\n"
    chunks = chunk_text("nest.py", text, max_chars=200)
    check_invariants("nest.py", text, chunks, 200)
    symbols = {(c.kind, c.symbol) for c in chunks}
    assert {("class", "Outer"), ("class", "Outer.Inner"), ("method", "Outer.Inner.m0"),
            ("method", "Outer.Inner.m7"), ("method", "Outer.run")} <= symbols
    outer = next(c for c in chunks if c.symbol == "Outer")
    assert "    class Inner:\n        def m0(self): ..." in outer.text


def test_line_windows_for_unknown_suffixes() -> None:
    text = "\n".join(f"line {i}: " + "x" * 40 for i in range(1, 41)) + "\n"
    chunks = chunk_text("notes.txt", text, max_chars=500)
    check_invariants("notes.txt", text, chunks, 500)
    assert all(c.kind == "lines" and c.symbol is None for c in chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 10), (8, 17), (15, 24), (22, 31), (29, 38),
                                                            (36, 40)]
    assert chunks[0].header == "notes.txt"


def test_line_windows_for_unparsable_text() -> None:
    text = "}}} ((( not python at all\n" * 30
    chunks = chunk_text("broken.py", text, max_chars=300)
    check_invariants("broken.py", text, chunks, 300)
    assert {c.kind for c in chunks} == {"lines"}
    # a small syntax error does not throw the structure away
    almost = PY.replace("def submit(self, fn, *args) -> Job:", "def submit(self, fn, *args) -> Job")
    assert {c.symbol for c in chunk_text("jobs.py", almost, max_chars=250)} >= {"Queue.size", "_now"}


def test_long_lines_blank_runs_and_skipped_files() -> None:
    text = "a = 1\n\n\n\n" + "x = '" + "y" * 2500 + "'\n\n\nb = 2\n"
    chunks = chunk_text("long.py", text, max_chars=1000)
    check_invariants("long.py", text, chunks, 1000)
    assert [(c.start_line, c.end_line, len(c.text)) for c in chunks if c.start_line == 5] == [
        (5, 5, 1000), (5, 5, 1000), (5, 5, 506)]
    assert "".join(c.text for c in chunks if c.start_line == 5) == text.split("\n")[4]
    assert chunk_text("empty.py", "") == [] and chunk_text("blank.md", "\n\n  \n") == []
    assert chunk_text("bin.py", "abc\x00def") == []
    assert chunk_text("huge.txt", "x\n" * (MAX_FILE_CHARS // 2 + 1)) == []
    with pytest.raises(ValueError, match="max_chars"):
        chunk_text("a.py", "x = 1", max_chars=0)


def test_real_packages_cover_every_line_within_bounds() -> None:
    files = package_sources("requests") | package_sources("pathspec", "**/*.py")
    assert len(files) > 20
    kinds = set()
    for max_chars in (300, 1500):
        for rel, text in files.items():
            chunks = chunk_text(rel, text, max_chars=max_chars)
            check_invariants(rel, text, chunks, max_chars)
            kinds.update(c.kind for c in chunks)
    assert {"module", "function", "class", "method"} <= kinds
    sessions = chunk_text("requests/sessions.py", files["requests/sessions.py"])
    assert {"Session.request", "Session.send", "SessionRedirectMixin.resolve_redirects"} <= {
        c.symbol for c in sessions}


PYTHONISH = st.sampled_from([
    "def f(x):", "    return x", "class C:", "    def m(self, a, b):", "        pass", "x = 1",
    "import os", "", "    ", "@decorator", "# comment", "if x:", "    y = [1, 2,", "    3]", "'''",
    "        return {'a': 1}", "async def g():", "    await h()", "}", "try:", "except Exception:",
    "    " + "z" * 120, "w = '" + "q" * 400 + "'",
])


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(PYTHONISH, st.text(max_size=30)), max_size=80),
       max_chars=st.integers(20, 1500), suffix=st.sampled_from([".py", ".py", ".js", ".go", ".md", ".txt"]))
def test_random_text_stays_within_bounds(lines: list[str], max_chars: int, suffix: str) -> None:
    text = "\n".join(line.replace("\x00", "") for line in lines)
    path = f"pkg/mod{suffix}"
    check_invariants(path, text, chunk_text(path, text, max_chars=max_chars), max_chars)


# ---- tags -------------------------------------------------------------------------------------

EXPECTED_DEFS = {
    "jobs.py": {("Job", "class"), ("MAX_WORKERS", "constant"), ("Queue", "class"), ("__init__", "method"),
                ("_now", "function"), ("drain", "method"), ("run", "method"), ("size", "method"),
                ("submit", "method")},
    "app.js": {("Server", "class"), ("createServer", "function"), ("handle", "method"),
               ("loadConfig", "function"), ("route", "method")},
    "store.ts": {("MemoryStore", "class"), ("Store", "interface"), ("countItems", "function"),
                 ("get", "method"), ("memory", "function"), ("put", "method")},
    "cache.go": {("Cache", "type"), ("Entry", "type"), ("Get", "method"), ("New", "function"),
                 ("Put", "method")},
    "shapes.rs": {("Point", "class"), ("Shape", "interface"), ("area", "method"), ("distance", "method"),
                  ("distance_is_symmetric", "function"), ("fmt", "method"), ("name", "method"),
                  ("new", "method"), ("tests", "module")},
    "Queue.java": {("Queue", "class"), ("Sink", "interface"), ("accept", "method"), ("offer", "method"),
                   ("poll", "method"), ("size", "method")},
    "buffer.c": {("Buffer", "type"), ("buffer_append", "function"), ("buffer_grow", "function"),
                 ("buffer_new", "function")},
    "matrix.cpp": {("Matrix", "class"), ("Matrix", "method"), ("at", "method"), ("multiply", "method")},
    "util.lua": {("describe", "method"), ("join", "function"), ("split", "function"), ("trim", "function")},
    "guide.md": {("Configuration", "section"), ("From source", "section"), ("Install", "section"),
                 ("Usage", "section")},
}
EXPECTED_REFS = {
    "jobs.py": {"Job", "deque", "Lock", "popleft", "run", "property"},
    "app.js": {"Server", "Map", "readFile", "parse"},
    "store.ts": {"MemoryStore", "Map", "filter"},
    "cache.go": {"Entry", "Cache", "Lock", "Now"},
    "shapes.rs": {"Point", "new", "sqrt", "assert_eq"},  # calls inside macros are token trees
    "Queue.java": {"ArrayDeque", "Deque", "addLast", "pollFirst"},
    "buffer.c": {"Buffer", "buffer_grow", "malloc", "memcpy"},
    "matrix.cpp": {"Matrix", "out_of_range", "vector"},
    "util.lua": {"trim", "gmatch", "concat"},
    "guide.md": set(),
}


@pytest.mark.parametrize("name", list(SOURCES))
def test_tags_defs_and_refs_per_language(name: str) -> None:
    tags = file_tags(name, SOURCES[name])
    assert {(t.name, t.category) for t in tags if t.kind == "def"} == EXPECTED_DEFS[name]
    refs = {t.name for t in tags if t.kind == "ref"}
    assert EXPECTED_REFS[name] <= refs
    assert all(t.path == name for t in tags) and tags == sorted(tags, key=lambda t: (t.line, t.kind, t.name))


def test_tag_lines_are_the_name_lines() -> None:
    tags = file_tags("jobs.py", PY)
    assert Tag("jobs.py", "Queue", "def", 30, "class") in tags
    assert Tag("jobs.py", "size", "def", 37, "method") in tags  # the def line, below @property
    assert Tag("jobs.py", "Job", "ref", 42, "call") in tags
    assert file_tags("notes.txt", "def f(): pass") == [] and file_tags("a.json", '{"a": 1}') == []


# ---- languages registry -----------------------------------------------------------------------


def test_every_language_parses_and_its_tags_query_compiles() -> None:
    for name, spec in languages.LANGUAGES.items():
        assert languages.parser(name).language == languages.grammar(name)
        tree = languages.parse(name, "\n")
        assert tree.root_node is not None
        query = languages.tags_query(name)
        assert (query is None) == (name == "json"), name
        for suffix in spec.suffixes:
            assert languages.language_for(f"src/x{suffix.upper()}") == name
    assert languages.language_for("Makefile") is None and languages.language_for("a.h") == "cpp"
    text = "x = 1\n"
    assert languages.parse("python", text) is languages.parse("python", text)  # chunk + tags: one parse


def test_lints_use_the_registry_for_the_same_suffixes() -> None:
    assert set(lints.TREE_SITTER_LANGUAGES) == {".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts",
                                                ".cts", ".tsx", ".go", ".rs", ".json"}
    assert lints.syntax_errors("fn main() {\n    let x = ;\n}\n", ".rs")[0].line == 2


# ---- PageRank and the repo map ----------------------------------------------------------------


def test_pagerank_matches_networkx() -> None:
    import networkx as nx
    rng = np.random.default_rng(0)
    n, m = 12, 40
    src, dst = rng.integers(0, n, m), rng.integers(0, n - 2, m)  # nodes n-2, n-1: no in-edges
    src[src == 3] = 4  # node 3: dangling
    weight = rng.uniform(0.1, 5.0, m)
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(range(n))
    for a, b, w in zip(src.tolist(), dst.tolist(), weight.tolist()):
        graph.add_edge(a, b, weight=w)
    personal = np.zeros(n)
    personal[[1, 5]] = 1.0
    for p in (None, personal):
        kwargs = {} if p is None else {"personalization": dict(enumerate(p)), "dangling": dict(enumerate(p))}
        expected = nx.pagerank(graph, weight="weight", tol=1e-10, max_iter=1000, **kwargs)
        ours = pagerank(n, src, dst, weight, p)
        np.testing.assert_allclose(ours, [expected[i] for i in range(n)], atol=1e-5)


def project() -> dict[str, str]:
    return {
        "app/config.py": "def load_settings(path):\n    return parse_file(path)\n\n\ndef parse_file(path):\n"
                         "    return {}\n",
        "app/server.py": "from app.config import load_settings\n\n\nclass Server:\n    def start(self):\n"
                         "        return load_settings('a')\n",
        "app/cli.py": "def main():\n    s = Server()\n    s.start()\n    load_settings('b')\n",
        "app/util.py": "def helper():\n    return 1\n",
    }


def aider_ranking(tags_by_file: dict[str, list[Tag]], focus: set[str], mentioned: set[str]) -> dict:
    """Aider's get_ranked_tags (aider/repomap.py @010afe8) with networkx, as the reference."""
    import math
    from collections import Counter, defaultdict

    import networkx as nx
    defines, references = defaultdict(set), defaultdict(list)
    for path, tags in tags_by_file.items():
        for t in tags:
            (defines[t.name].add(path) if t.kind == "def" else references[t.name].append(path))
    if not references:
        references = {k: list(v) for k, v in defines.items()}
    graph = nx.MultiDiGraph()
    for ident in defines:
        if ident not in references:
            for definer in defines[ident]:
                graph.add_edge(definer, definer, weight=0.1, ident=ident)
    for ident in set(defines) & set(references):
        mul = 1.0
        is_snake = "_" in ident and any(c.isalpha() for c in ident)
        is_camel = any(c.isupper() for c in ident) and any(c.islower() for c in ident)
        mul *= 10 if ident in mentioned else 1
        mul *= 10 if (is_snake or is_camel) and len(ident) >= 8 else 1
        mul *= 0.1 if ident.startswith("_") else 1
        mul *= 0.1 if len(defines[ident]) > 5 else 1
        for referencer, num_refs in Counter(references[ident]).items():
            for definer in defines[ident]:
                use_mul = mul * (50 if referencer in focus else 1)
                graph.add_edge(referencer, definer, weight=use_mul * math.sqrt(num_refs), ident=ident)
    personal = {p: 1.0 for p in tags_by_file if p in focus or mentioned & {*Path(p).parts, Path(p).stem}}
    kwargs = {"personalization": personal, "dangling": personal} if personal else {}
    ranked = nx.pagerank(graph, weight="weight", **kwargs)
    out = defaultdict(float)
    for src in graph.nodes:
        total = sum(d["weight"] for _, _, d in graph.out_edges(src, data=True))
        for _, dst, d in graph.out_edges(src, data=True):
            out[(dst, d["ident"])] += ranked[src] * d["weight"] / total
    return dict(out)


def test_rank_definitions_is_aiders_ranking() -> None:
    files = package_sources("requests")
    tags = {path: file_tags(path, text) for path, text in files.items()}
    for focus, mentioned in [(set(), set()), ({"requests/api.py"}, {"Session", "hooks"})]:
        expected = aider_ranking(tags, focus, mentioned)
        ours = rank_definitions(tags, focus_files=focus, mentioned=mentioned)
        assert {(p, n) for p, n, _ in ours} == set(expected)
        for path, name, score in ours:
            assert score == pytest.approx(expected[(path, name)], rel=1e-3, abs=1e-7)
        assert [s for _, _, s in ours] == sorted((s for _, _, s in ours), reverse=True)


def test_rank_definitions_weights_and_personalisation() -> None:
    files = project()
    tags = {path: file_tags(path, text) for path, text in files.items()}
    ranked = rank_definitions(tags)
    names = [name for _, name, _ in ranked]
    # config.py, referenced by two files, passes its rank on to what it calls (parse_file)
    assert names[0] == "parse_file" and names.index("load_settings") < names.index("Server")
    assert set(names) == {"load_settings", "parse_file", "Server", "start", "helper", "main"}
    score = {name: s for _, name, s in ranked}
    boosted = {name: s for _, name, s in rank_definitions(tags, mentioned={"start"})}
    assert boosted["start"] / boosted["Server"] > 5 * score["start"] / score["Server"]
    focused = {name: s for _, name, s in rank_definitions(tags, focus_files={"app/cli.py"})}
    assert focused["Server"] > 3 * score["Server"] and focused["helper"] < score["helper"]
    assert rank_definitions({}) == [] and rank_definitions({"a.txt": []}) == []


def test_repo_map_renders_files_and_leaves_out_focus_files() -> None:
    files = project()
    tags = {path: file_tags(path, text) for path, text in files.items()}
    text = repo_map(tags, files, budget_tokens=1024)
    assert text.startswith("app/config.py:\n|def load_settings(path):\n...\n|def parse_file(path):\n")
    assert "app/server.py:\n...\n|class Server:\n|    def start(self):\n" in text
    assert repo_map(tags, files.__getitem__, budget_tokens=1024) == text  # sources as a function
    focused = repo_map(tags, files, budget_tokens=1024, focus_files=["app/config.py"])
    assert "app/config.py" not in focused and "class Server" in focused
    small = repo_map(tags, files, budget_tokens=12)
    assert 0 < len(small) <= 48 and small.startswith("app/config.py:")
    assert repo_map(tags, files, budget_tokens=1) == ""


def test_repo_map_of_requests_fits_and_shows_central_definitions() -> None:
    files = package_sources("requests")
    tags = {path: file_tags(path, text) for path, text in files.items()}
    for budget in (256, 1024, 4096):
        text = repo_map(tags, files, budget_tokens=budget)
        assert budget * 0.7 <= len(text) / 4 <= budget, budget
        for line in text.splitlines():
            assert line in ("...",) or line.startswith("|") or line.endswith(":") or line in files
            assert len(line) <= 101
    text = repo_map(tags, files, budget_tokens=1024)
    assert "requests/sessions.py:" in text and "|class Session(SessionRedirectMixin):" in text
    assert "requests/api.py:" in text and "|def request(" in text
    top = {name for _, name, _ in rank_definitions(tags)[:30]}
    assert {"request", "PreparedRequest", "RequestException", "CaseInsensitiveDict"} <= top
