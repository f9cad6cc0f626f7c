"""Large catalogs: is the planner shown the right capabilities, at what prompt size, how fast.

For every question of a tool-retrieval corpus whose right capabilities are known, a run
goes through the public API (``Orchestrator.run`` with a scripted LLM that records each
planner request) over one pooled catalog of the corpora's capabilities, with the default
configuration, and we read what the first planner prompt showed:

* **in full**: every right capability's full signature is in the first prompt;
* **with a signature**: ... in full or abridged (parameter names and types on one line),
  so the planner can plan with it as it stands;
* **named**: every right capability is named in the first prompt — with a signature or
  in the names-only table — so the planner can use it or ask for it;
* **after asking**: with ``ORCH_PLANNER_CATALOG_REQUESTS`` (default 2), a scripted
  planner that was told which capabilities the user needs asks, by name, for those it
  saw named but without a signature, and with a search text describing it (the first
  line of its description, as a planner would say what it lacks) for those it did not
  see; recall counts whether every right capability had a signature in the prompt when
  the planner answers with its plan.

Questions are reported per corpus and kind, and summed by who wrote them: people asking
for something (RestBench, API-Bank, or a jsonl corpus that says ``"by_people": true``),
or a writer with the functions in view (an LLM for MetaTool and ToolBench, this project
for the built-in corpus).

Each ``--pool`` is one catalog: ``all`` (every capability of the corpora), or a size:
below what the corpora hold, a seeded sample of the largest corpus's tools is dropped
(each tool whole), above it generated business operations are added.

Then the selection's speed at 1,000 and 10,000 capabilities (the pooled catalog cut or
padded): the time of one ``plan_prompt`` over a warm index (what every run pays) and of
building the index (once per catalog revision, off the event loop).

Corpora:

* built in: ``benchmarks/selection_corpus.py``, 51 capabilities and 87 questions written
  for this project (always included);
* ``--data metatool:DIR``: MetaTool (Huang et al., 2023, MIT licence;
  github.com/HowieHwong/MetaTool): ``DIR/plugin_des.json`` (tool → description),
  ``DIR/all_clean_data.csv`` (Query,Tool: single-tool questions) and
  ``DIR/multi_tool_query_golden.json`` (``[{"query", "tool": [...]}]``); each tool is one
  capability ``<tool>.<tool>``. ``--sample N`` keeps N single-tool questions (seeded);
* ``--data restbench:DIR``: RestBench (Song et al., 2023, in RestGPT's repository,
  github.com/Yifan-Song793/RestGPT): ``DIR/specs/{tmdb,spotify}_oas.json`` and
  ``DIR/datasets/{tmdb,spotify}.json``; questions written by people, most needing
  several calls;
* ``--data toolbench:DIR``: ToolBench's test queries as StableToolBench publishes the
  solvable ones (``solvable_queries/test_instruction/*.json`` of
  github.com/THUNLP-MT/StableToolBench); questions written by an LLM from the APIs;
* ``--data apibank:DIR``: API-Bank's level-1 dialogues (``api-bank/`` of
  github.com/AlibabaResearch/DAMO-ConvAI): ``DIR/apis/*.py`` and
  ``DIR/lv1-lv2-samples/level-1-given-desc/*.jsonl``; dialogues written by people;
* ``--data jsonl:DIR``: any corpus as ``DIR/tools.jsonl`` (one capability a line:
  ``{"tool", "name", "description", "input_schema" or "parameters", "tool_description"?}``)
  and ``DIR/questions.jsonl`` (``{"question", "capabilities": ["tool.name", ...],
  "kind"?, "by_people"?}``).

``--data`` may be given several times; the capabilities are pooled into one catalog.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import random
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import common, selection_corpus
from orchestration import Catalog, Orchestrator, OrchestratorConfig, ScriptedLLM
from orchestration.errors import LLMError, LLMErrorKind
from orchestration.llm.base import LLMRequest
from planners._selection import first_line
from planners.prompt import PromptBuilder

_KEY = re.compile(r"^### ([A-Za-z0-9_.-]+)$", re.M)
_REST = "other capabilities exist but are not shown in full"  # after the full signatures


def in_full(system: str) -> set[str]:
    """The keys a planner prompt's system message shows with their full signature."""
    return set(_KEY.findall(system.partition(_REST)[0]))


def names_table_chars(system: str) -> int:
    """Characters of the names-only table in a planner prompt's system message."""
    table = system.partition("by name only, grouped by tool:\n")[2]
    return len(table.split("\n(")[0].split("\nIf the plan needs")[0]) if table else 0
_IDENT = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class Question:
    text: str
    gold: list[str]  # capability keys
    kind: str  # corpus/kind, e.g. "builtin/plain" or "metatool/multi"
    by_people: bool = False  # written by people asking, not with the functions in view


@dataclass
class Corpus:
    capabilities: list[dict[str, Any]] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)


def ident(text: str) -> str:
    """A capability or tool name the catalog accepts, made from any label."""
    name = _IDENT.sub("_", text).strip("_-") or "x"
    return name if name[0].isalpha() else f"t_{name}"


def builtin_corpus() -> Corpus:
    caps, tools = selection_corpus.catalog_entries()
    questions = [Question(q, gold, f"builtin/{kind}")
                 for kind, q, gold in selection_corpus.QUESTIONS]
    return Corpus(caps, tools, questions)


def load_metatool(path: Path, sample: int | None, seed: int) -> Corpus:
    descriptions = json.loads((path / "plugin_des.json").read_text("utf-8"))
    corpus = Corpus()
    keys = {}
    for tool, text in descriptions.items():
        name = ident(tool)
        keys[tool] = f"{name}.{name}"
        corpus.capabilities.append({"tool": name, "name": name, "description": text,
                                    "input_schema": {"type": "object", "properties": {}}})
    with open(path / "all_clean_data.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["Tool"] in keys]
    if sample is not None and sample < len(rows):
        rows = random.Random(seed).sample(rows, sample)
    corpus.questions += [Question(r["Query"], [keys[r["Tool"]]], "metatool/single")
                         for r in rows]
    multi = path / "multi_tool_query_golden.json"
    if multi.exists():
        for item in json.loads(multi.read_text("utf-8")):
            if all(t in keys for t in item["tool"]):
                corpus.questions.append(Question(item["query"], [keys[t] for t in item["tool"]],
                                                 "metatool/multi"))
    return corpus


_METHODS = ("get", "post", "put", "patch", "delete")


def load_restbench(path: Path) -> Corpus:
    """RestBench (Song et al., 2023, RestGPT's repository): ``specs/<api>_oas.json``
    (OpenAPI documents) and ``datasets/<api>.json`` (``[{"query", "solution": ["GET
    /path", ...]}]``), for ``tmdb`` and ``spotify``. Each operation is one capability named
    ``<operationId>`` (or method and path), its parameters those of the path and the
    operation; questions whose solution names an operation the document lacks are left out."""
    corpus = Corpus()
    for api in ("tmdb", "spotify"):
        spec = json.loads((path / "specs" / f"{api}_oas.json").read_text("utf-8"))
        keys = {}
        for route, item in spec.get("paths", {}).items():
            for method in _METHODS:
                op = item.get(method)
                if not isinstance(op, dict):
                    continue
                params = [p for p in [*item.get("parameters", []), *op.get("parameters", [])]
                          if isinstance(p, dict) and "name" in p]
                name = ident(op.get("operationId") or f"{method}_{route}")
                description = ". ".join(t.strip() for t in (op.get("summary", ""),
                                                            op.get("description", "")) if t)
                corpus.capabilities.append({
                    "tool": api, "name": name, "description": description,
                    "input_schema": {"type": "object", "properties": {
                        p["name"]: {"type": (p.get("schema") or {}).get("type", "string"),
                                    "description": p.get("description", "")} for p in params},
                        "required": [p["name"] for p in params if p.get("required")]}})
                keys[f"{method.upper()} {route}"] = f"{api}.{name}"
        for item in json.loads((path / "datasets" / f"{api}.json").read_text("utf-8")):
            solution = [keys.get(" ".join(s.split())) for s in item["solution"]]
            if all(solution):
                gold = sorted(set(filter(None, solution)))
                corpus.questions.append(Question(
                    item["query"], gold, f"restbench/{'multi' if len(gold) > 1 else 'single'}",
                    by_people=True))
    return corpus


def load_toolbench(path: Path) -> Corpus:
    """ToolBench's test queries (Qin et al., 2023), as StableToolBench publishes the
    solvable ones: ``DIR/*.json`` (``solvable_queries/test_instruction`` of
    github.com/THUNLP-MT/StableToolBench), each ``[{"query", "api_list": [{"tool_name",
    "api_name", "api_description", "required_parameters", "optional_parameters"}],
    "relevant APIs": [[tool, api], ...]}]``. Every API of every ``api_list`` is one
    capability ``<tool>.<api>``; the questions were written by an LLM from the APIs."""
    corpus = Corpus()
    seen: set[str] = set()
    for file in sorted(path.glob("*.json")):
        group = file.stem.split("_")[0]  # G1, G2, G3
        for item in json.loads(file.read_text("utf-8")):
            for api in item["api_list"]:
                tool, name = ident(api["tool_name"]), ident(api["api_name"])
                if f"{tool}.{name}" in seen:
                    continue
                seen.add(f"{tool}.{name}")
                params = [*api.get("required_parameters", []),
                          *api.get("optional_parameters", [])]
                corpus.capabilities.append({
                    "tool": tool, "name": name,
                    "description": (api.get("api_description") or "").strip(),
                    "input_schema": {"type": "object", "properties": {
                        p["name"]: {"type": _TOOLBENCH_TYPES.get(str(p.get("type")).upper(),
                                                                 "string"),
                                    "description": p.get("description") or ""}
                        for p in params if isinstance(p, dict) and p.get("name")},
                        "required": [p["name"] for p in api.get("required_parameters", [])
                                     if isinstance(p, dict) and p.get("name")]}})
            gold = sorted({f"{ident(t)}.{ident(a)}" for t, a in item["relevant APIs"]})
            if gold and all(g in seen for g in gold):
                corpus.questions.append(Question(
                    item["query"], gold,
                    f"toolbench/{group}-{'multi' if len(gold) > 1 else 'single'}"))
    return corpus


_TOOLBENCH_TYPES = {"STRING": "string", "NUMBER": "number", "BOOLEAN": "boolean",
                    "ARRAY": "array", "OBJECT": "object", "ENUM": "string"}
_PY_TYPES = {"str": "string", "int": "integer", "float": "number", "list": "array",
             "bool": "boolean", "dict": "object"}


def _api_class_attributes(source: str) -> Iterable[tuple[str, dict[str, Any]]]:
    """(class name, its literal class attributes) of a Python file, read with ``ast``
    (the file is parsed, never run)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            attributes: dict[str, Any] = {}
            for statement in node.body:
                if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                        and isinstance(statement.targets[0], ast.Name)):
                    try:
                        attributes[statement.targets[0].id] = ast.literal_eval(statement.value)
                    except ValueError:
                        continue
            yield node.name, attributes


def load_apibank(path: Path) -> Corpus:
    """API-Bank (Li et al., 2023, github.com/AlibabaResearch/DAMO-ConvAI, ``api-bank/``):
    ``DIR/apis/*.py`` (one class per API with ``description`` and ``input_parameters``)
    and ``DIR/lv1-lv2-samples/level-1-given-desc/*.jsonl`` (dialogues written by people,
    each API call a line). Every API is one capability ``apibank.<Class>``; each call in
    a dialogue is one question: what the user said up to that call (the conversation a
    chat assistant's planner would see), its right capability the API called."""
    corpus = Corpus()
    for file in sorted((path / "apis").glob("*.py")):
        for name, attributes in _api_class_attributes(file.read_text("utf-8")):
            if not isinstance(attributes.get("description"), str) or name == "ToolSearcher":
                continue
            params = attributes.get("input_parameters") or {}
            corpus.capabilities.append({
                "tool": "apibank", "name": name, "description": attributes["description"],
                "input_schema": {"type": "object", "required": list(params), "properties": {
                    key: {"type": _PY_TYPES.get(str(value.get("type")), "string"),
                          "description": str(value.get("description", ""))}
                    for key, value in params.items() if isinstance(value, dict)}}})
    known = {c["name"] for c in corpus.capabilities}
    seen: set[tuple[str, str]] = set()
    dialogues = sorted((path / "lv1-lv2-samples" / "level-1-given-desc").glob("*.jsonl"))
    for file in dialogues:
        said: list[str] = []
        for line in file.read_text("utf-8").splitlines():
            turn = json.loads(line) if line.strip() else {}
            if turn.get("role") == "User":
                said.append(str(turn.get("text", "")))
            elif turn.get("role") == "API" and said and turn.get("api_name") in known:
                text = " ".join(said)
                if (text, turn["api_name"]) not in seen:
                    seen.add((text, turn["api_name"]))
                    corpus.questions.append(Question(
                        text, [f"apibank.{turn['api_name']}"], "apibank/dialogue",
                        by_people=True))
    return corpus


def load_jsonl(path: Path, label: str) -> Corpus:
    corpus = Corpus()
    for line in (path / "tools.jsonl").read_text("utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        schema = item.get("input_schema") or item.get("parameters") or {}
        if "properties" not in schema:
            schema = {"type": "object", "properties": schema}
        tool = ident(item["tool"])
        corpus.capabilities.append({"tool": tool, "name": ident(item["name"]),
                                    "description": item.get("description", ""),
                                    "input_schema": schema})
        if item.get("tool_description"):
            corpus.tools[tool] = item["tool_description"]
    for line in (path / "questions.jsonl").read_text("utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            gold = [".".join(ident(p) for p in key.split(".", 1)) for key in item["capabilities"]]
            corpus.questions.append(Question(item["question"], gold,
                                             f"{label}/{item.get('kind', 'all')}",
                                             by_people=bool(item.get("by_people"))))
    return corpus


# ----------------------------------------------------------------------------- catalogs


def _words_of(text: str) -> list[str]:
    return text.split()


_DOMAINS = _words_of("""accounts ads analytics assets audit backups billing builds calendar campaigns cases
catalog chat compliance contracts crm datasets deployments devices documents domains email
events expenses fleet forms grants helpdesk hr identity incidents inventory invoices jobs
leads learning legal licenses logistics loyalty maintenance media meetings metrics
monitoring notifications orders payroll permits pipelines policies portfolio procurement
projects property quotes recruiting registry releases rentals reports reservations
retail reviews risk schedules security shipments storage subscriptions suppliers surveys
tasks tenants timesheets training travel vendors warehouse webhooks wiki workflows""")
_VERBS = _words_of("""create update delete list get archive export import search sync approve reject
assign close reopen publish restore duplicate merge tag validate schedule cancel
summarize""")
_OBJECTS = _words_of("record item entry batch template note attachment comment owner status")


def padding(count: int, taken: set[str]) -> Iterable[dict[str, Any]]:
    """``count`` generated business operations (``crm.approve_batch`` and the like), as
    OpenAPI documents name and describe theirs."""
    made = 0
    for domain in _DOMAINS:
        for verb in _VERBS:
            for obj in _OBJECTS:
                if made >= count:
                    return
                tool, name = f"{domain}_api", f"{verb}_{obj}"
                if f"{tool}.{name}" in taken:
                    continue
                made += 1
                yield {"tool": tool, "name": name,
                       "description": f"{verb.capitalize()} a {obj} in {domain}. Returns the "
                       f"{obj} with its id, owner, status and timestamps.",
                       "input_schema": {"type": "object", "required": [f"{obj}_id"],
                                        "properties": {
                                            f"{obj}_id": {"type": "string",
                                                          "description": f"The {obj}'s id."},
                                            "note": {"type": "string", "maxLength": 500},
                                            "dry_run": {"type": "boolean", "default": False}}}}


def _noop(**kwargs: Any) -> dict[str, Any]:
    return {}


def build_catalog(entries: Iterable[dict[str, Any]], tools: dict[str, str]) -> Catalog:
    catalog = Catalog()
    for item in entries:
        if catalog.has(item["tool"], item["name"]):
            continue
        catalog.add_function(_noop, tool=item["tool"], capability=item["name"],
                             description=item["description"], input_schema=item["input_schema"])
    for tool, text in tools.items():
        if tool in catalog.tools:
            catalog.describe_tool(tool, text)
    return catalog


def pooled(corpora: list[Corpus], size: int | None, seed: int = 7
           ) -> tuple[Catalog, list[Question]]:
    """One catalog of the corpora's capabilities, in a seeded shuffled order (when a
    question shares no word with its capability, selection falls back to catalog order,
    and a corpus placed first would be favoured), and the questions it can answer.

    ``size`` above what the corpora hold pads the catalog with generated business
    operations; below it, whole tools of the largest corpus are dropped (seeded) until
    it fits — a tool's capabilities stay together, as a real catalog holds a service
    whole, and the smaller corpora stay whole — with the questions that needed them."""
    rng = random.Random(seed)
    kept = [list(corpus.capabilities) for corpus in corpora]
    total = sum(map(len, kept))
    if size is not None and size < total:
        orders = []
        for entries in kept:
            tools = sorted({e["tool"] for e in entries})
            rng.shuffle(tools)
            orders.append(tools)
        while total > size:
            largest = max(range(len(kept)), key=lambda i: len(kept[i]))
            tool = orders[largest].pop()
            before = len(kept[largest])
            kept[largest] = [e for e in kept[largest] if e["tool"] != tool]
            total -= before - len(kept[largest])
    entries = [e for group in kept for e in group]
    tools = {t: d for corpus in corpora for t, d in corpus.tools.items()}
    if size is not None and size > len(entries):
        taken = {f"{e['tool']}.{e['name']}" for e in entries}
        entries += list(padding(size - len(entries), taken))
    rng.shuffle(entries)
    catalog = build_catalog(entries, tools)
    questions = [q for corpus in corpora for q in corpus.questions
                 if all(catalog.has(*k.split(".", 1)) for k in q.gold)]
    return catalog, questions


# ----------------------------------------------------------------------------- recall


@dataclass
class Outcome:
    kind: str
    by_people: bool
    full: bool  # every right capability in full in the first prompt
    signed: bool  # ... in full or abridged
    named: bool  # ... with a signature or in the names-only table
    after: bool  # ... with a signature by the time the plan was asked for the last time
    names_chars: int  # the names-only table's size in the first prompt
    first_chars: int
    total_chars: int
    rounds: int


def named_in(text: str, keys: Iterable[str]) -> set[str]:
    """The ``keys`` that ``text`` names anywhere (with a signature or in the
    names-only table), as whole names."""
    return {k for k in keys
            if re.search(r"(?<![\w.-])" + re.escape(k) + r"(?![\w-])", text)}


class ScriptedPlanner:
    """Knows what the user needs; asks for it when it was not shown, then stops the run
    (the measurement ends with the planner's last request)."""

    def __init__(self, gold: list[str], ask: bool, lines: dict[str, str]) -> None:
        self.gold = gold
        self.lines = lines  # what each capability does, in one line
        self.ask = ask
        self.requests: list[LLMRequest] = []

    def __call__(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        text = "\n".join(m["content"] for m in request.messages)
        full = set(_KEY.findall(text))
        missing = [g for g in self.gold if g not in full]
        invited = "instead of a plan" in request.messages[0]["content"]
        if missing and self.ask and invited and "No more requests" not in text:
            named = named_in(request.messages[0]["content"], missing)
            names = [g for g in missing if g in named]
            search = " ".join(self.lines[g] for g in missing if g not in named)
            return {"need": {"capabilities": names, "search": search}}
        return LLMError(LLMErrorKind.AUTH, "the benchmark's planner stops here")


def measure_recall(catalog: Catalog, questions: list[Question], *, ask: bool,
                   budget: int) -> list[Outcome]:
    outcomes = []
    config = OrchestratorConfig(synthesis_enabled=False, planner_prompt_budget_chars=budget,
                                planner_catalog_requests=2 if ask else 0, llm_max_retries=0,
                                stream_plan=False)
    lines = {c.key: first_line(c.description) for c in catalog}
    current: list[ScriptedPlanner] = []
    orch = Orchestrator(catalog=catalog, llm=ScriptedLLM(lambda r: current[-1](r)),
                        config=config)
    for question in questions:
        planner = ScriptedPlanner(question.gold, ask, lines)
        current.append(planner)
        orch.run(question.text)
        first, last = planner.requests[0], planner.requests[-1]
        first_text = "\n".join(m["content"] for m in first.messages)
        last_text = "\n".join(m["content"] for m in last.messages)
        gold = set(question.gold)
        outcomes.append(Outcome(
            question.kind, question.by_people, gold <= in_full(first.messages[0]["content"]),
            gold <= set(_KEY.findall(first_text)),
            gold <= named_in(first.messages[0]["content"], gold),
            gold <= set(_KEY.findall(last_text)),
            names_table_chars(first.messages[0]["content"]), len(first.prompt_text),
            len(last.prompt_text), len(planner.requests) - 1))
    return outcomes


_PEOPLE = "all written by people"
_GENERATED = "all written with the functions in view"


def summarise(lexical: list[Outcome], asking: list[Outcome]) -> list[dict[str, Any]]:
    groups: dict[str, list[tuple[Outcome, Outcome]]] = defaultdict(list)
    for a, b in zip(lexical, asking, strict=True):
        groups[a.kind].append((a, b))
        groups[_PEOPLE if a.by_people else _GENERATED].append((a, b))
        groups["all"].append((a, b))
    rows = []
    summaries = (_PEOPLE, _GENERATED, "all")
    for kind in sorted(groups, key=lambda k: (k in summaries, summaries.index(k)
                                              if k in summaries else 0, k)):
        pairs = groups[kind]
        n = len(pairs)
        rows.append({
            "kind": kind, "n": n,
            "full": 100 * sum(a.full for a, _ in pairs) / n,
            "signed": 100 * sum(a.signed for a, _ in pairs) / n,
            "named": 100 * sum(a.named for a, _ in pairs) / n,
            "after": 100 * sum(b.after for _, b in pairs) / n,
            "chars": statistics.mean(a.first_chars for a, _ in pairs),
            "names_chars": statistics.mean(a.names_chars for a, _ in pairs),
            "asked": 100 * sum(b.rounds > 0 for _, b in pairs) / n,
            "total_chars": statistics.mean(b.total_chars for _, b in pairs),
        })
    return rows


# ----------------------------------------------------------------------------- speed


def measure_speed(corpora: list[Corpus], size: int, queries: list[str],
                  budget: int) -> dict[str, Any]:
    catalog, _ = pooled(corpora, size)
    config = OrchestratorConfig(planner_prompt_budget_chars=budget)
    builder = PromptBuilder()
    started = time.perf_counter()
    builder.selection_index(catalog, config.prompt_type_guidance)
    build_s = time.perf_counter() - started
    for q in queries:  # warm: render the blocks that rank high once, as runs do
        builder.plan_prompt(q, catalog, config)
    times, cpu = [], []
    for q in queries:
        started, started_cpu = time.perf_counter(), time.thread_time()
        builder.plan_prompt(q, catalog, config)
        cpu.append((time.thread_time() - started_cpu) * 1000)
        times.append((time.perf_counter() - started) * 1000)
    return {"size": len(catalog), "build_s": build_s, "median_ms": statistics.median(times),
            "p95_ms": common.percentile(times, 0.95), "max_ms": max(times),
            "cpu_median_ms": statistics.median(cpu), "cpu_p95_ms": common.percentile(cpu, 0.95)}


# ----------------------------------------------------------------------------- report


def render(argv: list[str], facts: dict[str, Any], sources: list[str], budget: int,
           pools: list[tuple[int, list[dict[str, Any]]]], speed: list[dict[str, Any]]) -> str:
    parts = [common.section_preamble("Capability selection (large catalogs)", "selection",
                                     argv, facts)]
    parts.append(
        f"Corpora: {', '.join(sources)}. Default configuration: prompt budget {budget:,} "
        "characters, lexical ranking (no embeddings). *in full*: every right capability's "
        "full signature is in the first planner prompt; *signature*: in full or abridged "
        "(parameter names and types), enough to plan with; *named*: every right "
        "capability is named in it (with a signature or in the names-only table); *after "
        "asking*: every right capability had a signature when the scripted planner (told "
        "what the user needs) stopped asking (ORCH_PLANNER_CATALOG_REQUESTS=2); *asked*: "
        "share of questions where it asked. Prompt sizes are characters of the first "
        "request and of the last one.\n")
    parts.append(_DATA_NOTE)
    headers = ["questions", "n", "in full %", "signature %", "named %", "after asking %",
               "asked %", "first prompt chars", "of which names table", "last prompt chars"]
    for size, rows in pools:
        parts.append(f"Pooled catalog of {size:,} capabilities:\n")
        table = [[r["kind"], f"{r['n']:,}", f"{r['full']:.1f}", f"{r['signed']:.1f}",
                  f"{r['named']:.1f}",
                  f"{r['after']:.1f}", f"{r['asked']:.1f}", f"{r['chars']:,.0f}",
                  f"{r['names_chars']:,.0f}", f"{r['total_chars']:,.0f}"] for r in rows]
        parts.append(common.md_table(headers, table) + "\n")
    headers = ["capabilities", "index build s (once per revision)", "plan_prompt median ms",
               "p95 ms", "max ms", "CPU median ms", "CPU p95 ms"]
    table = [[f"{s['size']:,}", f"{s['build_s']:.2f}", f"{s['median_ms']:.2f}",
              f"{s['p95_ms']:.2f}", f"{s['max_ms']:.2f}", f"{s['cpu_median_ms']:.2f}",
              f"{s['cpu_p95_ms']:.2f}"] for s in speed]
    parts.append("Selection speed: one `PromptBuilder.plan_prompt` (ranking, budget walk, "
                 "prompt text) over a warm index, the pooled catalog cut or padded with "
                 "generated business operations to the size shown. The machine is shared "
                 "with other jobs, so wall-clock times (the first columns) wait for the CPU "
                 "at times; the CPU columns are the thread's own time.\n")
    parts.append(common.md_table(headers, table) + "\n")
    return "\n".join(parts)


_DATA_NOTE = (
    "Data (not in this repository: each `DIR` is a local copy): `metatool:DIR` holds "
    "`plugin_des.json`, `all_clean_data.csv` and `multi_tool_query_golden.json` from the "
    "`dataset/` folder of github.com/HowieHwong/MetaTool (MIT); `restbench:DIR` holds "
    "`specs/` and `datasets/` of github.com/Yifan-Song793/RestGPT; `toolbench:DIR` the "
    "`solvable_queries/test_instruction/*.json` of github.com/THUNLP-MT/StableToolBench; "
    "`apibank:DIR` the `api-bank/` folder of github.com/AlibabaResearch/DAMO-ConvAI. "
    "MetaTool's and ToolBench's questions were written by an LLM from the tools; "
    "RestBench's and API-Bank's by people. `planners/_lexicon.py` was written after "
    "reading about 15 of MetaTool's misses, and the selection's shares were chosen on "
    "MetaTool, ToolBench's G1 groups, API-Bank and the built-in corpus; RestBench and "
    "ToolBench's G2 and G3 groups were held out (not looked at while tuning). *after "
    "asking* measures the mechanism with a planner that knows what it needs (it searches "
    "with the first line of the capability's description), not a real model's wording.\n")


_LOADERS = {"restbench": load_restbench, "toolbench": load_toolbench,
            "apibank": load_apibank}
_SOURCES = {
    "restbench": "RestBench (TMDB and Spotify OpenAPI documents, questions by people)",
    "toolbench": "ToolBench (StableToolBench's solvable test queries, G1–G3)",
    "apibank": "API-Bank (level-1 dialogues by people)",
}


def _corpora(specs: list[str], sample: int | None, seed: int) -> tuple[list[Corpus], list[str]]:
    corpora, sources = [builtin_corpus()], ["built-in (benchmarks/selection_corpus.py)"]
    for spec in specs:
        kind, _, raw = spec.partition(":")
        path = Path(raw)
        if kind == "metatool":
            corpora.append(load_metatool(path, sample, seed))
            sources.append(f"MetaTool ({sample or 'all'} single-tool questions sampled with "
                           f"seed {seed}, all multi-tool ones)")
        elif kind in _LOADERS:
            corpora.append(_LOADERS[kind](path))
            sources.append(_SOURCES[kind])
        elif kind == "jsonl":
            corpora.append(load_jsonl(path, path.name))
            sources.append(f"{path.name} (jsonl)")
        else:
            raise SystemExit(f"--data {spec!r}: expected metatool:DIR, restbench:DIR, "
                             "toolbench:DIR, apibank:DIR or jsonl:DIR")
    return corpora, sources


def _pool_size(text: str) -> int | None:
    return None if text == "all" else int(text)


def _shareable(argv: list[str]) -> list[str]:
    """The command line as docs/benchmarks.md shows it: each ``--data NAME:PATH`` as
    ``NAME:DIR`` (the data are local copies, described in the section, not this machine's
    paths)."""
    return [re.sub(r"^(\w+):.+$", r"\1:DIR", a) if i and argv[i - 1] == "--data" else a
            for i, a in enumerate(argv)]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m benchmarks.selection", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_report_arguments(parser)
    parser.add_argument("--data", action="append", default=[],
                        help="metatool:DIR, restbench:DIR, toolbench:DIR, apibank:DIR or "
                        "jsonl:DIR (repeatable; pooled)")
    parser.add_argument("--sample", type=int, default=2000,
                        help="single-tool MetaTool questions kept (2000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pool", action="append", type=_pool_size,
                        help="catalog size: 'all' or a number of capabilities (repeatable; "
                        "default: 1300 and all)")
    parser.add_argument("--budget", type=int,
                        default=OrchestratorConfig().planner_prompt_budget_chars)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        help="catalog sizes for the speed figures (1000,10000)")
    args = common.parse_args(parser, argv)
    sizes = args.sizes or ([300] if args.quick else [1000, 10_000])
    pools = args.pool or ([None] if args.quick else [1300, None])
    facts = common.machine_facts()
    corpora, sources = _corpora(args.data, args.sample, args.seed)
    results = []
    for pool in pools:
        catalog, questions = pooled(corpora, pool, args.seed)
        if args.quick:  # a few of each kind
            by_kind: dict[str, list[Question]] = defaultdict(list)
            for q in questions:
                by_kind[q.kind].append(q)
            questions = [q for group in by_kind.values() for q in group[:8]]
        print(f"pooled catalog: {len(catalog):,} capabilities, {len(questions):,} questions",
              flush=True)
        lexical = measure_recall(catalog, questions, ask=False, budget=args.budget)
        asking = measure_recall(catalog, questions, ask=True, budget=args.budget)
        rows = summarise(lexical, asking)
        results.append((len(catalog), rows))
        for r in rows:
            print(f"{r['kind']:<40} n={r['n']:>5}  in full {r['full']:5.1f}%  signature "
                  f"{r['signed']:5.1f}%  named "
                  f"{r['named']:5.1f}%  after asking {r['after']:5.1f}%  first prompt "
                  f"{r['chars']:,.0f} chars", flush=True)
    texts = [q.text for q in questions[:200]]
    speed = []
    for size in sizes:
        s = measure_speed(corpora, size, texts, args.budget)
        speed.append(s)
        print(f"{s['size']:>6,} capabilities: plan_prompt median {s['median_ms']:.2f} ms, "
              f"p95 {s['p95_ms']:.2f} ms (CPU {s['cpu_median_ms']:.2f}, "
              f"{s['cpu_p95_ms']:.2f}); index build {s['build_s']:.2f} s", flush=True)
    if not args.no_report:
        common.write_section(args.report, "selection", render(
            _shareable(argv), facts, sources, args.budget, results, speed))
        print(f"wrote the selection section of {args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
