// dagwright run viewer: live colours from the run's event stream, section refreshes from
// the server-rendered page, approve/reject/cancel. No framework, no build step.
(() => {
  "use strict";
  const body = document.body;
  const runId = body.dataset.runId;
  if (!runId) return; // the runs list has nothing live
  const base = body.dataset.base || "";
  const api = `${base}/v1/runs/${encodeURIComponent(runId)}`;
  const FINAL = new Set(["succeeded", "partial", "failed", "cancelled"]);
  const SECTIONS = ["summary", "dag", "pending", "timeline"];
  const running = new Set(); // steps started and not finished, as the stream told us
  let refreshTimer = null;
  let source = null;
  let drawnAt = performance.now(); // when the summary's live time was rendered

  function setStatus(el, status) {
    for (const cls of [...el.classList]) if (cls.startsWith("status-")) el.classList.remove(cls);
    el.classList.add(`status-${status}`);
    el.dataset.status = status;
  }

  function setStepStatus(stepId, status) {
    document.querySelectorAll(`g.node[data-step="${CSS.escape(stepId)}"]`).forEach((node) => {
      setStatus(node, status);
      const title = node.querySelector("title");
      if (title) title.textContent = title.textContent.replace(/\([a-z_]+\)$/, `(${status})`);
    });
  }

  function setRunStatus(status) {
    const chip = document.getElementById("run-status");
    if (chip) { setStatus(chip, status); chip.textContent = status; }
  }

  let liveText = "";
  function liveState(text) {
    liveText = text;
    const el = document.getElementById("live-state");
    if (el) el.textContent = text;
  }

  // Re-render the sections from the server: one place renders, the page stays in step.
  async function refresh() {
    let response;
    try {
      response = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    } catch (_) { return; }
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const open = new Set([...document.querySelectorAll("details[open]")].map((d) => d.dataset.key));
    const drafts = new Map();
    document.querySelectorAll(".approval").forEach((card) => {
      drafts.set(card.dataset.step, {
        params: card.querySelector("textarea.params").value,
        note: card.querySelector("input.note").value,
      });
    });
    for (const id of SECTIONS) {
      const next = fresh.getElementById(id);
      const current = document.getElementById(id);
      if (next && current) current.replaceWith(document.importNode(next, true));
    }
    document.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
    document.querySelectorAll(".approval").forEach((card) => {
      const draft = drafts.get(card.dataset.step);
      if (!draft) return;
      card.querySelector("textarea.params").value = draft.params;
      card.querySelector("input.note").value = draft.note;
    });
    for (const stepId of running) {
      const node = document.querySelector(`g.node[data-step="${CSS.escape(stepId)}"]`);
      if (node && node.dataset.status === "pending") setStepStatus(stepId, "running");
    }
    body.dataset.final = fresh.body.dataset.final;
    drawnAt = performance.now();
    liveState(liveText); // the summary was re-rendered without it
  }

  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 120);
  }

  function follow() {
    if (source) return;
    source = new EventSource(`${api}/events`);
    const on = (type, handler) => source.addEventListener(type, (message) => handler(JSON.parse(message.data).data));
    source.onopen = () => liveState("live");
    source.onerror = () => {
      if (source && source.readyState === EventSource.CLOSED) { source = null; liveState(""); }
      else liveState("reconnecting…");
    };
    on("plan_ready", () => scheduleRefresh());
    // steps started while a plan streamed, whose answer was then not accepted
    on("plan_discarded", (data) => { data.steps.forEach((s) => running.delete(s)); scheduleRefresh(); });
    on("step_started", (data) => { running.add(data.step_id); setStepStatus(data.step_id, "running"); });
    on("attempt_finished", () => scheduleRefresh());
    on("step_finished", (data) => { running.delete(data.step_id); setStepStatus(data.step_id, data.status); scheduleRefresh(); });
    on("approval_required", (data) => { running.delete(data.step_id); setStepStatus(data.step_id, "awaiting_approval"); scheduleRefresh(); });
    on("run_finished", (data) => {
      setRunStatus(data.status);
      scheduleRefresh();
      if (FINAL.has(data.status)) { source.close(); source = null; liveState(""); }
    });
  }

  async function post(url, payload, messageEl) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(payload),
    });
    if (response.ok) return true;
    let text = `HTTP ${response.status}`;
    try { text = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    messageEl.textContent = text;
    messageEl.classList.add("error-text");
    return false;
  }

  async function decide(button, approved) {
    const card = button.closest(".approval");
    const message = card.querySelector(".message");
    const textarea = card.querySelector("textarea.params");
    const note = card.querySelector("input.note").value.trim();
    const payload = { approved };
    if (note) payload.note = note;
    if (approved && textarea.value.trim() !== textarea.defaultValue.trim()) {
      try {
        payload.params = JSON.parse(textarea.value);
        // the plan approval shows {"plan": ...}; what is sent is the plan itself
        if (card.dataset.step === "@plan" && payload.params && payload.params.plan) payload.params = payload.params.plan;
      } catch (error) {
        message.textContent = `the parameters are not valid JSON: ${error.message}`;
        message.classList.add("error-text");
        return;
      }
    }
    card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    message.classList.remove("error-text");
    message.textContent = approved ? "approving…" : "rejecting…";
    const url = `${api}/approvals/${encodeURIComponent(card.dataset.step)}`;
    if (await post(url, payload, message)) {
      message.textContent = approved ? "approved: the run goes on" : "rejected: the run goes on without it";
      follow();
      scheduleRefresh();
    } else {
      card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (button && button.classList.contains("approve")) return void decide(button, true);
    if (button && button.classList.contains("reject")) return void decide(button, false);
    if (button && button.classList.contains("cancel-run")) {
      const message = button.parentElement.querySelector(".message");
      button.disabled = true;
      post(`${api}/cancel`, {}, message).then((ok) => { if (ok) scheduleRefresh(); else button.disabled = false; });
      return;
    }
    const node = event.target.closest("g.node");
    if (node) {
      const row = document.getElementById(`step-${node.dataset.step}`);
      if (!row) return;
      row.scrollIntoView({ behavior: "smooth", block: "center" });
      row.classList.add("flash");
      setTimeout(() => row.classList.remove("flash"), 1600);
      const first = row.querySelector("details.attempt");
      if (first) first.open = true;
    }
  });

  if (body.dataset.final !== "true") follow();

  // a running run's time goes on between events: the server's figure plus the time since
  setInterval(() => {
    const el = document.getElementById("elapsed");
    if (el && el.dataset.liveFrom !== undefined) {
      el.textContent = (parseFloat(el.dataset.liveFrom) + (performance.now() - drawnAt) / 1000).toFixed(2);
    }
  }, 250);
  // and the bars of running steps grow: redrawn by the server every 2 s while one runs
  setInterval(() => {
    if (body.dataset.final !== "true" && document.querySelector("svg.bar rect.seg-running")) scheduleRefresh();
  }, 2000);
})();
