// EvoTrainer report page: renders the model embedded in #evo-report-data.
// Plotly draws the figures built in Python (evo/report/figures.py); this file
// adds the version table, the details panel and click-to-select. Text from the
// lineage (hypotheses, messages, PR bodies) is set with textContent, never as HTML.
"use strict";
async function decodeReportData() {
  // gzip + base64 (evo/report/html.py encode_data), decoded in memory: no request is made.
  const text = document.getElementById("evo-report-data").textContent.trim();
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const json = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  return JSON.parse(json);
}

decodeReportData().then((data) => { window.EVO_REPORT = data; renderReport(data); }).catch((err) => {
  document.getElementById("details").textContent = "this page could not decode its data: " + err;
  throw err;
});

function renderReport(DATA) {
  const MODEL = DATA.model;
  const BY_NAME = new Map(MODEL.versions.map((v) => [v.name, v]));
  const PLOT_CONFIG = { displaylogo: false, responsive: true };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("data-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === "") continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const num = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
  const signed = (x, d = 3) => (x === null || x === undefined ? "–" : (x >= 0 ? "+" : "") + Number(x).toFixed(d));
  function delta(c) {
    if (!c || c.delta === undefined || c.delta === null) return "";
    let t = "Δ " + signed(c.delta);
    if (c.ci_low !== undefined && c.ci_high !== undefined) t += " [" + signed(c.ci_low) + ", " + signed(c.ci_high) + "]";
    return t;
  }
  const label = (v) => (v.intervention ? v.intervention.change || v.intervention.factor || "" : "");
  const badge = (text, kind) => el("span", { class: "badge " + kind + "-" + String(text).replace(/[^a-z-]/g, "") }, text);

  // ------------------------------------------------------------ header and totals
  function renderHeader() {
    const w = MODEL.workspace, t = MODEL.totals;
    document.title = "evo report: " + w.name;
    document.getElementById("title").textContent = "EvoTrainer report: " + w.name;
    document.getElementById("subtitle").textContent =
      w.domain + " · " + w.model + " · " + t.versions + " versions · generated " + w.generated;
    const rows = [
      ["versions by state", Object.entries(t.states).map(([k, n]) => k + " " + n).join(", ")],
      ["outcomes", Object.entries(t.outcomes).map(([k, n]) => k + " " + n).join(", ")],
      ["promoted path", MODEL.promoted_path.join(" → ") || "–"],
      ["GPU-hours estimated at the gate", num(t.gpu_hours_estimated, 4)],
      ["GPU-hours charged to the budget", num(t.gpu_hours_charged, 4)],
      ["training wall-clock hours (measured)", num(t.train_wall_hours, 4)],
      ["tokens generated / trained", t.tokens_generated.toLocaleString() + " / " + t.tokens_trained.toLocaleString()],
      ["agent tokens / cost", t.agent_tokens.toLocaleString() + " / $" + num(t.agent_cost_usd, 2) + " over " + t.agent_steps + " proposals"],
    ];
    const table = document.getElementById("totals-table");
    for (const [k, v] of rows) table.append(el("tr", {}, el("th", {}, k), el("td", {}, v)));
  }

  // ------------------------------------------------------------ version table
  function renderTable() {
    const body = document.getElementById("versions-body");
    for (const v of MODEL.versions) {
      const c = v.comparisons || {};
      const row = el("tr", { class: "version-row", "data-version": v.name, "data-state": v.state },
        el("td", { class: "name" }, v.name),
        el("td", {}, v.parents.join(" + ") || "–"),
        el("td", {}, badge(v.state, "state"), v.on_path ? el("span", { class: "path-mark", title: "on the promoted path" }, "★") : ""),
        el("td", { class: "change" }, label(v)),
        el("td", { class: "outcome" }, v.outcome ? badge(v.outcome, "outcome") : "not judged", v.confounded ? " (confounded)" : ""),
        el("td", { class: "vs-parent" }, delta(c.vs_parent)),
        el("td", { class: "vs-control" }, delta(c.vs_control)),
        el("td", {}, v.avg_at_k === null ? "–" : num(v.avg_at_k)));
      row.addEventListener("click", () => select(v.name, true));
      body.append(row);
    }
  }

  // ------------------------------------------------------------ details panel
  function section(title, ...children) {
    const items = children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== "");
    return items.length ? el("section", { class: "detail-section" }, el("h3", {}, title), items) : null;
  }
  function keyValues(obj) {
    if (!obj || typeof obj !== "object") return null;
    const entries = Object.entries(obj).filter(([, v]) => v !== null && v !== undefined);
    if (!entries.length) return null;
    return el("table", { class: "kv" }, entries.map(([k, v]) =>
      el("tr", {}, el("th", {}, k), el("td", {}, typeof v === "number" ? String(Number(v.toPrecision(5))) :
        typeof v === "object" ? JSON.stringify(v) : String(v)))));
  }
  function comparisonTable(c) {
    const rows = [["deciding", c.deciding], ["vs control", c.vs_control], ["vs parent", c.vs_parent]].filter(([, x]) => x);
    if (!rows.length) return null;
    return el("table", { class: "grid comparisons" },
      el("tr", {}, ["comparison", "against", "outcome", "value", "Δ [95% CI]", "p", "noise floor"].map((h) => el("th", {}, h))),
      rows.map(([name, x]) => el("tr", { "data-comparison": name },
        el("td", {}, name), el("td", {}, x.control || x.against || "–"), el("td", {}, x.outcome || "–"),
        el("td", {}, num(x.value)), el("td", {}, delta(x)), el("td", {}, x.p_value === undefined ? "–" : Number(x.p_value).toPrecision(3)),
        el("td", {}, x.noise_floor === undefined ? "–" : "±" + num(x.noise_floor, 4)))));
  }
  function manifest(m) {
    if (!m) return null;
    const ev = m.evidence || {};
    const findings = Array.isArray(ev) ? ev : ev.findings || [];
    return [
      el("p", {}, el("b", {}, "[" + (m.kind || "?") + "] "), m.change || m.factor || "", m.skill ? " (skill " + m.skill + ")" : ""),
      m.hypothesis ? el("p", { class: "hypothesis" }, el("b", {}, "Hypothesis: "), m.hypothesis) : null,
      m.predicted_effect ? el("p", {}, el("b", {}, "Predicted effect: "), m.predicted_effect) : null,
      findings.length ? el("p", {}, el("b", {}, "Evidence (findings): "), findings.join(", ")) : null,
      keyValues(ev.metrics),
    ];
  }
  function diagnosis(d) {
    if (!d) return el("p", { class: "muted" }, "no diagnosis.json in this version's artifact folder");
    const layers = Object.entries(d.findings);
    return [
      el("p", { class: "muted" }, "harness " + (d.harness_version || "?") +
        (d.broken_analyzers.length ? " · broken analyzers: " + d.broken_analyzers.join(", ") : "")),
      layers.length ? layers.map(([layer, items]) => el("div", { class: "layer", "data-layer": layer }, el("h4", {}, layer),
        el("ul", {}, items.map((f) => el("li", { class: "sev-" + f.severity }, el("b", {}, f.severity + " "), el("code", {}, f.id), " ", f.message)))))
        : el("p", {}, "no findings"),
    ];
  }
  function audits(v) {
    const d = v.diagnosis;
    const vetoes = v.vetoes.length ? v.vetoes : d ? d.audits.vetoes : [];
    return [
      d ? el("p", {}, "audits ran: " + (d.audits.ran.join(", ") || "none") + (d.audits.failed.length ? " · failed: " + d.audits.failed.join(", ") : "")) : null,
      vetoes.length ? el("ul", { class: "vetoes" }, vetoes.map((x) => el("li", {}, el("b", {}, "VETO " + x.audit + ": "), x.message)))
        : el("p", {}, v.outcome ? "no veto" : "not judged yet"),
    ];
  }
  function select(name, scroll) {
    const v = BY_NAME.get(name);
    if (!v) return;
    for (const row of document.querySelectorAll(".version-row")) row.classList.toggle("selected", row.dataset.version === name);
    const panel = document.getElementById("details");
    panel.replaceChildren();
    panel.dataset.version = name;
    const c = v.comparisons || {};
    panel.append(...[
      el("h2", {}, v.name + " ", badge(v.state, "state"), " ", v.outcome ? badge(v.outcome, "outcome") : "",
        v.confounded ? el("span", { class: "warn" }, " confounded with extra training") : ""),
      el("p", { class: "muted" }, "parents " + (v.parents.join(" + ") || "–") + " · agent " + (v.agent || "–") +
        " · commit " + String(v.commit || "").slice(0, 12) + " · created " + (v.created || "–")),
      section("Comparisons", comparisonTable(c), v.reasons.length ? el("ul", {}, v.reasons.map((r) => el("li", {}, r))) : null),
      section("Intervention", manifest(v.intervention), v.merge_reason ? el("p", {}, "merge reason: " + v.merge_reason) : null),
      section("Harness revision", manifest(v.harness_revision)),
      section("Backtest prediction", v.backtest ? [el("p", {}, v.backtest.message || ""), keyValues(v.backtest.prediction)] : null),
      section("Audits and vetoes", audits(v)),
      section("Diagnosis findings by layer", diagnosis(v.diagnosis)),
      section("Gate and cost", v.gate ? el("p", {}, "gate: " + v.gate.status + " (threshold " + v.gate.threshold + " GPU-h)") : null,
        v.reviews.map((r) => el("p", {}, r.event + " by " + (r.by || "–") + ": " + r.reason)), keyValues(v.cost)),
      section("Decisions", v.decisions.map((d) => el("p", {}, el("b", {}, d.event + ": "), d.reason || ""))),
      section("Controls trained from this version", v.controls.map((k) =>
        el("p", {}, k.key + " (for " + (k.for || "–") + "): Avg@k " + num(k.avg_at_k) + (k.continuation ? " · vs " + v.name + " " + delta(k.continuation) : "")))),
      section("Evaluation", v.avg_at_k === null ? null : el("p", {}, "Avg@" + v.k + " " + num(v.avg_at_k) + " over " + v.n_tasks + " tasks"), keyValues(v.per_stratum)),
      section("Training", v.training.steps ? el("div", { id: "detail-training", class: "plot" }) : el("p", { class: "muted" }, "no metrics.jsonl (not trained, or artifacts not on this machine)")),
      section("evo pr " + v.name, v.pr_body ? el("pre", { class: "pr-body" }, v.pr_body)
        : el("p", { class: "muted" }, "run `evo pr " + v.name + "` (this page embeds the bodies of the " + MODEL.workspace.pr_bodies + " newest versions)")),
    ].filter(Boolean));
    if (v.training.steps) drawVersionTraining(v);
    if (scroll) panel.scrollIntoView({ behavior: "auto", block: "start" });
  }
  function drawVersionTraining(v) {
    const s = v.training.series;
    const keys = MODEL.training_keys.filter((k) => k in s);
    const traces = keys.map((k) => ({ x: s.step, y: s[k], name: k, mode: s.step.length <= 200 ? "lines+markers" : "lines", type: "scatter" }));
    Plotly.newPlot("detail-training", traces, { template: DATA.template, height: 320, margin: { l: 50, r: 20, t: 20, b: 40 },
      xaxis: { title: { text: "global training step" } }, legend: { orientation: "h" } }, PLOT_CONFIG);
  }

  // ------------------------------------------------------------ skills and memory
  function renderSkills() {
    const box = document.getElementById("skills-table");
    if (!MODEL.skills.length) box.append(el("p", { class: "muted" }, "no skill used yet"));
    for (const s of MODEL.skills) {
      box.append(el("p", {}, el("b", {}, s.skill), " — " + s.uses + " uses, " + s.wins + " wins, " + s.losses + " losses: ",
        s.versions.map((u, i) => [i ? ", " : "", el("a", { href: "#details", onclick: () => select(u.version, true) }, u.version),
          " (" + (u.outcome || u.state) + ")"])));
    }
    const neg = MODEL.negative_evidence;
    const list = document.getElementById("negative-evidence");
    if (neg.error) list.append(el("li", { class: "warn" }, neg.error));
    if (!neg.entries.length && !neg.error) list.append(el("li", { class: "muted" }, "none yet"));
    for (const e of neg.entries) {
      list.append(el("li", {}, (e.kind || "policy") + " ", el("code", {}, e.change || e.factor || ""),
        e.skill ? " (skill " + e.skill + ")" : "", ": " + (e.outcomes || []).join(", ") + " in " + (e.versions || []).join(", ")));
    }
  }

  // ------------------------------------------------------------ figures
  function drawFigures() {
    for (const [id, fig] of Object.entries(DATA.figures)) {
      const node = document.getElementById(id);
      if (!node) continue;
      Plotly.newPlot(node, fig.data, Object.assign({ template: DATA.template }, fig.layout), PLOT_CONFIG);
      node.on("plotly_click", (ev) => {
        const name = ev.points && ev.points[0] && ev.points[0].customdata;
        if (typeof name === "string" && BY_NAME.has(name)) select(name, true);
      });
    }
    for (const section of document.querySelectorAll("[data-needs]")) {
      if (!(section.dataset.needs in DATA.figures)) section.querySelector(".plot").replaceWith(
        el("p", { class: "muted" }, section.dataset.empty));
    }
  }

  renderHeader();
  renderTable();
  renderSkills();
  drawFigures();
  const head = MODEL.promoted_path[MODEL.promoted_path.length - 1] || (MODEL.versions[0] || {}).name;
  if (head) select(head, false);
  document.body.dataset.ready = "true";
}
