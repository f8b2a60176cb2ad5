"""The style sheet and the one script of `agent report`'s page, inlined into it (the page reads with no
network). The script only reads and re-classes what the page already holds: it takes no data from the
log (every logged text reaches the page escaped, as text), so nothing a model or a kernel wrote can run.

Keys: j / → next turn, k / ← previous turn, t / T the same turn of the next / previous trajectory,
b the best kernel's turn, g / G first / last turn, d open or close the diffs of the current turn, ? help.
A link to `report.html#turn-3` (or `#best`) opens on that turn.
"""

from __future__ import annotations

CSS = """
body { font-family: -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif; margin: 0; color: #1d1d1f; }
header { max-width: 1400px; margin: 20px auto 0; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
h3 { font-size: 14px; margin: 16px 0 4px; } h4 { font-size: 13px; margin: 10px 0 4px; }
.sub { color: #666; margin-top: 0; }
.note { color: #555; font-size: 13px; max-width: 60em; }
.layout { display: flex; max-width: 1400px; margin: 0 auto; gap: 20px; padding: 0 16px; align-items: flex-start; }
nav#turn-nav { position: sticky; top: 0; max-height: 100vh; overflow-y: auto; width: 190px; flex: none;
               font-size: 12px; padding: 12px 0; }
nav#turn-nav h2 { margin-top: 0; font-size: 14px; }
nav#turn-nav a { display: block; padding: 2px 6px; color: #1d1d1f; text-decoration: none; border-radius: 3px;
                 white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
nav#turn-nav a:hover { background: #eef2f8; } nav#turn-nav a.current { background: #1b4f72; color: #fff; }
nav#turn-nav .group { color: #7a4fb0; font-weight: 600; margin: 8px 0 2px; }
.keys { color: #666; margin-top: 14px; line-height: 1.6; }
kbd { font-family: monospace; border: 1px solid #ccc; border-radius: 3px; padding: 0 4px; background: #fafafa; }
main { flex: 1; min-width: 0; padding-bottom: 60vh; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
th, td { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
th { color: #666; font-weight: 600; border-bottom: 1px solid #ddd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th, td:not(:last-child) { white-space: nowrap; }  /* only the last column (why) wraps */
.kv th { border: none; padding-right: 18px; }
.ok { color: #2a9d4b; font-weight: 600; } .bad { color: #c0392b; font-weight: 600; }
.warn { color: #a86b00; } .scripted { color: #7a4fb0; font-weight: 600; } .dim { color: #777; }
.chart svg { width: 100%; height: auto; max-width: 1000px; }
.pair { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 0 16px; }
.pair svg { width: 100%; height: auto; }
.shapes { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 8px; }
.shapes svg { width: 100%; height: auto; }
pre { font-size: 12px; background: #f7f7f9; padding: 8px; overflow-x: auto; border-radius: 4px; margin: 4px 0; }
.prose { white-space: pre-wrap; font-size: 13.5px; line-height: 1.45; margin: 4px 0 8px; }
.reasoning { color: #555; font-style: italic; border-left: 3px solid #c9b3e6; padding-left: 10px; }
.label { font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .04em; color: #888; }
section.turn { border-left: 4px solid #e3e3e3; padding: 2px 0 8px 14px; margin: 18px 0; scroll-margin-top: 8px; }
section.turn.current { border-left-color: #1b4f72; background: #fbfcfe; }
section.turn h3 { margin-top: 4px; font-size: 15px; } section.turn h3 .dim { font-weight: 400; font-size: 12.5px; }
.badge { display: inline-block; font-size: 11px; font-weight: 700; padding: 1px 7px; border-radius: 9px;
         background: #eee; color: #333; margin-left: 6px; vertical-align: 1px; }
.badge.ok { background: #dff3e4; color: #1e7a3a; } .badge.bad { background: #f8e0dd; color: #a3281c; }
.badge.best { background: #1b4f72; color: #fff; }
.call { border: 1px solid #e6e6e6; border-radius: 5px; padding: 4px 10px 6px; margin: 8px 0; }
.call h4 { margin: 4px 0; } section.turn p { font-size: 13px; margin: 4px 0; }
details > summary { cursor: pointer; font-size: 12.5px; color: #333; margin: 4px 0; }
pre.diff { line-height: 1.35; } .diff .add { background: #e6f6e9; color: #14532d; display: block; }
.diff .del { background: #fbe7e5; color: #7f1d1d; display: block; } .diff .hunk { color: #7a4fb0; display: block; }
.diff .ctx { display: block; color: #444; }
.lanes { display: grid; gap: 8px; margin: 8px 0; }
.lane-head { font-size: 12.5px; background: #f3eefa; border-radius: 4px; padding: 4px 8px; }
a.card { display: block; border: 1px solid #e3e3e3; border-radius: 4px; padding: 4px 8px; font-size: 12px;
         color: #1d1d1f; text-decoration: none; } a.card:hover { border-color: #1b4f72; }
a.card.current { border-color: #1b4f72; box-shadow: 0 0 0 2px #1b4f7233; }
.lane-empty { font-size: 12px; color: #bbb; padding: 4px 8px; }
#viewer-status { position: fixed; right: 12px; bottom: 12px; background: #1b4f72; color: #fff; font-size: 12px;
                 padding: 5px 10px; border-radius: 4px; opacity: .92; }
#viewer-help { position: fixed; right: 12px; bottom: 44px; background: #fff; border: 1px solid #ccc;
               border-radius: 6px; padding: 8px 14px; font-size: 12.5px; box-shadow: 0 2px 8px #0002; }
#viewer-help[hidden] { display: none; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var turns = Array.prototype.slice.call(document.querySelectorAll("section.turn"));
  var root = document.documentElement;
  var current = -1;
  var status = document.createElement("div");
  status.id = "viewer-status";
  var help = document.createElement("div");
  help.id = "viewer-help";
  help.hidden = true;
  var keys = [["j  \u2192", "next turn"], ["k  \u2190", "previous turn"], ["t  T", "same turn, next / previous trajectory"],
              ["b", "the best kernel's turn"], ["g  G", "first / last turn"], ["d", "open / close this turn's diffs"],
              ["?", "this help"]];
  keys.forEach(function (pair) {
    var row = document.createElement("div");
    var key = document.createElement("kbd");
    key.textContent = pair[0];
    row.appendChild(key);
    row.appendChild(document.createTextNode(" " + pair[1]));
    help.appendChild(row);
  });
  document.body.appendChild(help);
  document.body.appendChild(status);

  function linksTo(id) {
    return Array.prototype.slice.call(document.querySelectorAll("a[href='#" + id + "']"));
  }
  function select(index, scroll) {
    if (index < 0 || index >= turns.length) return;
    if (current >= 0) {
      turns[current].classList.remove("current");
      linksTo(turns[current].id).forEach(function (a) { a.classList.remove("current"); });
    }
    current = index;
    var turn = turns[index];
    turn.classList.add("current");
    linksTo(turn.id).forEach(function (a) { a.classList.add("current"); });
    document.body.setAttribute("data-current", turn.id);
    status.textContent = turn.getAttribute("data-label") + "  (" + (index + 1) + " of " + turns.length +
      ")  \u00b7  j/k turns \u00b7 b best \u00b7 ? keys";
    if (scroll) {
      turn.scrollIntoView({block: "start"});
      if (history.replaceState) history.replaceState(null, "", "#" + turn.id);
    }
  }
  function indexOf(id) {
    for (var i = 0; i < turns.length; i++) if (turns[i].id === id) return i;
    return -1;
  }
  function best() {
    for (var i = 0; i < turns.length; i++) if (turns[i].hasAttribute("data-best")) return i;
    return -1;
  }
  function otherTrajectory(step) {
    if (current < 0) return 0;
    var here = turns[current];
    var numbers = [];
    turns.forEach(function (t) {
      var n = t.getAttribute("data-trajectory");
      if (n && numbers.indexOf(n) < 0) numbers.push(n);
    });
    if (numbers.length < 2) return current;
    var at = numbers.indexOf(here.getAttribute("data-trajectory"));
    var target = numbers[((at < 0 ? 0 : at) + step + numbers.length) % numbers.length];
    var wanted = Number(here.getAttribute("data-turn"));
    var found = -1;
    turns.forEach(function (t, i) {  // that trajectory's turn of this number, else its last one before it
      if (t.getAttribute("data-trajectory") !== target) return;
      if (found < 0 || Number(t.getAttribute("data-turn")) <= wanted) found = i;
    });
    return found < 0 ? current : found;
  }
  function toggleDiffs() {
    if (current < 0) return;
    var diffs = turns[current].querySelectorAll("details.diff");
    var open = Array.prototype.some.call(diffs, function (d) { return !d.open; });
    Array.prototype.forEach.call(diffs, function (d) { d.open = open; });
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var tag = event.target && event.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA") return;
    var actions = {
      "j": function () { select(current + 1, true); }, "ArrowRight": function () { select(current + 1, true); },
      "k": function () { select(Math.max(current - 1, 0), true); },
      "ArrowLeft": function () { select(Math.max(current - 1, 0), true); },
      "t": function () { select(otherTrajectory(1), true); }, "T": function () { select(otherTrajectory(-1), true); },
      "b": function () { select(best(), true); }, "g": function () { select(0, true); },
      "G": function () { select(turns.length - 1, true); }, "d": toggleDiffs,
      "?": function () { help.hidden = !help.hidden; }
    };
    var action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    action();
  });
  turns.forEach(function (turn, i) {
    turn.addEventListener("click", function () { if (current !== i) select(i, false); });
  });
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[href^='#turn-']");
    if (!link) return;
    var i = indexOf(link.getAttribute("href").slice(1));
    if (i >= 0) { event.preventDefault(); select(i, true); }
  });
  var start = location.hash === "#best" ? best() : indexOf(location.hash.slice(1));
  select(start >= 0 ? start : 0, start >= 0);
  root.setAttribute("data-viewer", "ready");
  root.setAttribute("data-turns", String(turns.length));
})();
"""
