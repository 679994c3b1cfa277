// aicli web: follows a task's events (Server-Sent Events) and appends each as text.
// Everything an agent printed is untrusted: it goes into the page with textContent only.
"use strict";
(function () {
  var box = document.getElementById("events");
  if (!box || !window.EventSource) { return; }
  var src = box.getAttribute("data-src");
  var state = document.getElementById("live");
  function line(kind, text) {
    var li = document.createElement("li");
    var k = document.createElement("span");
    k.className = "kind";
    k.textContent = kind;
    li.appendChild(k);
    var t = document.createElement("span");
    t.className = "text";
    t.textContent = text;
    li.appendChild(t);
    box.appendChild(li);
  }
  function describe(ev) {
    switch (ev.type) {
      case "assistant_text": return ["text", ev.text];
      case "thinking": return ["thinking", ev.text || ""];
      case "tool_call": return ["tool", (ev.name || "") + " " + JSON.stringify(ev.input || {})];
      case "tool_result": return ["result", String(ev.output || ev.content || "").slice(0, 2000)];
      case "error": return ["error " + (ev.error_kind || ""), ev.message || ""];
      case "question": return ["question", ev.question || ""];
      case "final": return ["final", (ev.success ? "succeeded" : "failed") + (ev.text ? ": " + ev.text : "")];
      case "session_started": return ["session", ev.session_id || ""];
      case "usage": return null;
      default: return [ev.type || "event", ""];
    }
  }
  var es = new EventSource(src);
  es.addEventListener("agent", function (m) {
    var ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    var d = describe(ev);
    if (d) { line(d[0], d[1]); }
  });
  es.onopen = function () { if (state) { state.textContent = "live"; } };
  es.onerror = function () { if (state) { state.textContent = "reconnecting…"; } };
})();
