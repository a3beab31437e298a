"""The page's fixed parts: the HTML template, its CSS, and the rollout browser's JavaScript.

The script is allowed by its hash in the page's Content-Security-Policy, so any change to `_SCRIPT` changes
the hash `render_report` computes; nothing else may run on the page."""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="%CSP%">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%STYLE%</style>
</head><body>
%BODY%
<script type="application/json" id="rollout-data">%DATA%</script>
<script>%SCRIPT%</script>
</body></html>
"""

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1240px;padding:0 18px 40px;
color:#1d1d1f;background:#fff}
header{border-bottom:1px solid #ddd;margin-bottom:8px}h1{margin:18px 0 2px;font-size:22px}
h2{font-size:18px;margin:26px 0 10px;border-bottom:1px solid #eee;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
nav a{margin-right:14px;color:#1f6fb4;text-decoration:none}nav{margin:8px 0 10px}
.muted{color:#6e6e73}.notes{background:#fff8e1;border:1px solid #f0d98c;padding:6px 6px 6px 26px;border-radius:4px;
font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;
min-width:150px}.card .label{font-size:12px;color:#6e6e73}.card .value{font-size:20px;font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start}.plots{display:flex;flex-wrap:wrap;gap:12px}svg.plot{border:1px solid #e5e5e5;border-radius:4px;background:#fff}
svg .frame{fill:none;stroke:#bbb}svg .grid{stroke:#eee}svg .axis{stroke:#999}svg .tick{font-size:10px;fill:#555}
svg .ptitle{font-size:13px;font-weight:600;fill:#222}svg .legend{font-size:10px;fill:#333}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 8px;
text-align:right}th:first-child,td:first-child{text-align:left}thead th{background:#f5f5f7}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f9;border:1px solid #e5e5e5;padding:8px;
border-radius:4px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;margin:4px 0}
.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin-bottom:10px;position:sticky;top:0;
background:#fff;padding:6px 0;border-bottom:1px solid #eee}
.controls input{width:280px}
.rollout{border:1px solid #ddd;border-left:5px solid #bbb;border-radius:4px;padding:6px 10px;margin:8px 0}
.rollout.ok{border-left-color:#2ca02c}.rollout.bad{border-left-color:#d62728}
.rollout .meta{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#444}
.rollout .meta b{color:#111}.badge{font-weight:600}.ok .badge{color:#1b7a1b}.bad .badge{color:#b31b1b}
.rollout summary{cursor:pointer;font-size:12px;color:#555}
.rollout.with-images{display:flex;gap:12px;align-items:flex-start}.rollout .main{flex:1;min-width:0}
.thumbs{display:flex;flex-direction:column;gap:6px;flex:none;padding-top:2px}
.thumbs .clip{display:flex;gap:3px;padding:2px;border:1px dashed #bbb;border-radius:3px}
img.thumb{width:64px;height:64px;object-fit:contain;image-rendering:pixelated;border:1px solid #ddd;
background:#f5f5f7;display:block}
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var body = document.body;
  window.addEventListener("error", function (e) { body.setAttribute("data-js-error", String(e.message)); });
  var data = [];
  try {
    data = JSON.parse(document.getElementById("rollout-data").textContent || "[]");
  } catch (err) {
    body.setAttribute("data-js-error", "rollout data: " + err);
  }
  var LIMIT = 300;
  var list = document.getElementById("rollout-list");
  var count = document.getElementById("rollout-count");
  var fSel = document.getElementById("rollout-filter");
  var sSel = document.getElementById("rollout-step");
  var qBox = document.getElementById("rollout-search");

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "\u2013";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return String(x);
    return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toPrecision(4).replace(/\.?0+$/, "");
  }
  function advText(a) {
    if (a === null || a === undefined) return "\u2013";
    if (!Array.isArray(a)) return fmt(a);
    if (!a.length) return "[] (no tokens)";
    var lo = Infinity, hi = -Infinity, sum = 0;
    a.forEach(function (v) { lo = Math.min(lo, v); hi = Math.max(hi, v); sum += v; });
    return "per token: mean " + fmt(sum / a.length) + ", min " + fmt(lo) + ", max " + fmt(hi) + " (" + a.length + ")";
  }
  function field(parent, label, value) {
    var span = el("span");
    span.appendChild(document.createTextNode(label + " "));
    span.appendChild(el("b", "", value));
    parent.appendChild(span);
  }
  function thumbs(d) {
    // the prompt's images: clones of the hidden store's images "rimg-N", N from d.images (numbers only)
    if (!Array.isArray(d.images)) return null;
    var box = el("div", "thumbs");
    d.images.forEach(function (item, i) {
      if (!Array.isArray(item)) return;
      var holder = el("div", item.length > 1 ? "clip" : "image");
      item.forEach(function (k, j) {
        var src = Number.isInteger(k) ? document.getElementById("rimg-" + k) : null;
        if (!src) return;
        var img = src.cloneNode(false);
        img.removeAttribute("id");
        img.className = "thumb";
        img.alt = item.length > 1 ? "prompt clip " + (i + 1) + ", frame " + (j + 1) : "prompt image " + (i + 1);
        holder.appendChild(img);
      });
      if (holder.childNodes.length) box.appendChild(holder);
    });
    return box.childNodes.length ? box : null;
  }
  function card(d) {
    var article = el("article", "rollout " + (d.correct === true ? "ok" : "bad"));
    article.setAttribute("data-step", String(d.step));
    var c = article, pics = thumbs(d);
    if (pics) {
      article.className += " with-images";
      article.appendChild(pics);
      c = el("div", "main");
      article.appendChild(c);
    }
    var meta = el("div", "meta");
    meta.appendChild(el("span", "badge", d.correct === true ? "\u2713 correct" : (d.correct === false ? "\u2717 incorrect" : "? unverified")));
    field(meta, "step", fmt(d.step));
    field(meta, "prompt", fmt(d.group) + (d.prompt_id !== undefined && d.prompt_id !== null ? " (" + d.prompt_id + ")" : ""));
    field(meta, "sample", fmt(d.sample));
    field(meta, "reward", fmt(d.reward));
    field(meta, "advantage", advText(d.advantage));
    field(meta, "finish", fmt(d.finish_reason));
    field(meta, "length", fmt(d.length));
    if (d.answer !== null && d.answer !== undefined) field(meta, "reference answer", d.answer);
    c.appendChild(meta);
    var comps = d.rewards || {};
    var names = Object.keys(comps);
    if (names.length) {
      var cm = el("div", "meta components");
      names.forEach(function (k) {
        var span = el("span");
        span.appendChild(document.createTextNode(k + " "));
        span.appendChild(el("b", "", fmt(comps[k])));
        var why = (d.reasons || {})[k];
        if (why) span.appendChild(document.createTextNode(" (" + why + ")"));
        cm.appendChild(span);
      });
      c.appendChild(cm);
    }
    var det = el("details");
    det.appendChild(el("summary", "", "prompt"));
    det.appendChild(el("pre", "prompt", d.prompt));
    c.appendChild(det);
    c.appendChild(el("pre", "response", d.response));
    return article;
  }
  function imageStatus() {
    // how many prompt thumbnails are on screen and how many decoded (naturalWidth > 0), for tests and readers
    var all = list ? list.querySelectorAll("img.thumb") : [];
    var loaded = 0;
    Array.prototype.forEach.call(all, function (img) { if (img.complete && img.naturalWidth > 0) loaded += 1; });
    body.setAttribute("data-images-shown", String(all.length));
    body.setAttribute("data-images-loaded", String(loaded));
  }
  function matches(d, f, q, st) {
    if (f === "correct" && d.correct !== true) return false;
    if (f === "incorrect" && d.correct === true) return false;
    if (st !== "all" && String(d.step) !== st) return false;
    if (q) {
      var hay = [d.prompt, d.response, d.answer, d.prompt_id].join("\n").toLowerCase();
      if (hay.indexOf(q) < 0) return false;
    }
    return true;
  }
  function render() {
    if (!fSel) return;
    var f = fSel.value, st = sSel.value, q = qBox.value.trim().toLowerCase();
    var frag = document.createDocumentFragment();
    var matched = 0, shown = 0;
    data.forEach(function (d) {
      if (!matches(d, f, q, st)) return;
      matched += 1;
      if (shown < LIMIT) { frag.appendChild(card(d)); shown += 1; }
    });
    list.textContent = "";
    list.appendChild(frag);
    count.textContent = matched + " of " + data.length + " samples" + (matched > shown ? " (showing the first " + shown + ")" : "");
    count.setAttribute("data-matched", String(matched));
    count.setAttribute("data-shown", String(shown));
    count.setAttribute("data-total", String(data.length));
    imageStatus();
  }
  function parseHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      if (!part) return;
      var i = part.indexOf("=");
      var key = i < 0 ? part : part.slice(0, i);
      var val = i < 0 ? "" : part.slice(i + 1);
      try { out[decodeURIComponent(key)] = decodeURIComponent(val.replace(/\+/g, " ")); } catch (err) { /* bad escape */ }
    });
    return out;
  }
  function writeHash() {
    var parts = [];
    if (fSel.value !== "all") parts.push("filter=" + encodeURIComponent(fSel.value));
    if (sSel.value !== "all") parts.push("step=" + encodeURIComponent(sSel.value));
    if (qBox.value) parts.push("q=" + encodeURIComponent(qBox.value));
    try { history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search); }
    catch (err) { /* some file:// setups refuse; the state still applies */ }
  }
  var steps = [];
  function fromHash() {
    var h = parseHash();
    fSel.value = (h.filter === "correct" || h.filter === "incorrect") ? h.filter : "all";
    sSel.value = steps.indexOf(h.step) >= 0 ? h.step : "all";
    qBox.value = h.q || "";
    render();
  }
  if (list) {
    list.addEventListener("load", imageStatus, true);  // load events do not bubble; capture them
    list.addEventListener("error", imageStatus, true);
  }
  if (fSel) {
    data.forEach(function (d) { var s = String(d.step); if (steps.indexOf(s) < 0) steps.push(s); });
    steps.sort(function (a, b) { return Number(a) - Number(b); });
    steps.forEach(function (s) { var o = el("option", "", "step " + s); o.value = s; sSel.appendChild(o); });
    [fSel, sSel].forEach(function (n) { n.addEventListener("change", function () { writeHash(); render(); }); });
    qBox.addEventListener("input", function () { writeHash(); render(); });
    window.addEventListener("hashchange", fromHash);
    fromHash();
  }
  var drawn = 0;
  document.querySelectorAll("svg.plot").forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    if (box.width > 0 && box.height > 0 && svg.querySelector("polyline, circle")) drawn += 1;
  });
  body.setAttribute("data-plots-rendered", String(drawn));
  body.setAttribute("data-ready", "1");
})();
"""
