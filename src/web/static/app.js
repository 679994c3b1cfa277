// aicli web: the page's one script. It follows a task's events (Server-Sent Events),
// keeps the batch and task pages live by polling the JSON API, and sends the page's
// actions (answer, cancel, resume, start) with the session's CSRF token.
// Everything an agent printed is untrusted: it goes into the page with textContent only.
"use strict";
(function () {
  var csrf = null;
  function session() {
    if (csrf !== null) { return Promise.resolve(csrf); }
    return fetch("/api/session", { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (s) { csrf = s.csrf || ""; return csrf; });
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // The action box: what was asked, then the action's progress and its end.
  var box = document.getElementById("action");
  function say(text) { if (box) { box.textContent = text; } }
  function follow(started, what) {
    var a = started.action;
    say(what + " (action " + a.id + "): running…");
    if (box && started.batch_url) {
      var link = el("a", null, " open batch " + a.batch_id);
      link.id = "action-batch";
      link.href = started.batch_url;
      box.appendChild(document.createTextNode(" "));
      box.appendChild(link);
    }
    var poll = setInterval(function () {
      fetch("/api/actions/" + a.id, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (v) {
          if (v.state === "running") { return; }
          clearInterval(poll);
          var link = document.getElementById("action-batch");
          var words = { succeeded: ["check", "done"], blocked: ["pause", "asks again"], failed: ["cross", "failed"] };
          var w = words[v.state] || [null, v.state];
          say(what + " (action " + v.id + "): ");
          if (box && w[0]) { var i = el("span", "i i-" + w[0]); i.setAttribute("aria-hidden", "true"); box.appendChild(i); }
          if (box) {
            box.appendChild(document.createTextNode(w[1] +
              (v.exit_code === null ? "" : " (exit " + v.exit_code + ")") +
              (v.state === "failed" && v.output ? "\n" + v.output : "")));
          }
          if (link && box) { box.appendChild(document.createTextNode(" ")); box.appendChild(link); }
        })
        .catch(function () {});
    }, 1000);
  }
  function post(url, body, what, raw) {
    say(what + "…");
    return session().then(function (token) {
      var headers = { "X-CSRF-Token": token };
      if (body !== null) { headers["Content-Type"] = "application/json"; }
      return fetch(url, {
        method: "POST", credentials: "same-origin", headers: headers,
        body: body === null ? undefined : (raw ? body : JSON.stringify(body)),
      });
    }).then(function (r) {
      return r.text().then(function (t) {
        if (!r.ok) { say(what + ": refused (" + r.status + "): " + t); return null; }
        var v = null;
        try { v = JSON.parse(t); } catch (e) { v = null; }
        if (v && v.action) { follow(v, what); } else { say(what + ": sent"); }
        return v;
      });
    }).catch(function (e) { say(what + ": " + e); });
  }

  // Answers: an option's button, or the text.
  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (!(t instanceof Element)) { return; }
    var opt = t.closest("button.option");
    if (opt) {
      var f = opt.closest("form.answer");
      ev.preventDefault();
      answer(f, opt.getAttribute("data-answer") || "");
      return;
    }
    var b = t.closest("button[data-url]");
    if (b) {
      ev.preventDefault();
      var what = b.getAttribute("data-what") || (b.id === "resume-batch" ? "resume" : "cancel");
      // A button that loses work says what first; the server wants the confirmation too.
      var ask = b.getAttribute("data-confirm"), body = null;
      if (ask !== null) {
        if (!window.confirm(ask)) { return; }
        body = { confirm: true };
      }
      b.disabled = true;
      post(b.getAttribute("data-url"), body, what).then(function () { b.disabled = false; });
    }
  });
  function answer(form, text) {
    var b = form.getAttribute("data-batch"), t = form.getAttribute("data-task");
    if (!text.trim()) { say("the answer is empty: pick an option or write one"); return; }
    var buttons = form.querySelectorAll("button");
    for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = true; }
    post("/api/batches/" + encodeURIComponent(b) + "/tasks/" + encodeURIComponent(t) + "/answer",
      { text: text }, "answer to " + b + "/" + t).then(function (v) {
      if (!v) { for (var i = 0; i < buttons.length; i++) { buttons[i].disabled = false; } }
    });
  }
  document.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!(f instanceof HTMLFormElement)) { return; }
    ev.preventDefault();
    if (f.classList.contains("answer")) {
      answer(f, f.elements.namedItem("text").value);
    } else if (f.id === "start-task") {
      var req = { prompt: f.elements.namedItem("prompt").value };
      ["provider", "runner", "model"].forEach(function (k) {
        var v = f.elements.namedItem(k).value;
        if (v) { req[k] = v; }
      });
      post("/api/tasks", req, "start a task");
    } else if (f.id === "start-batch") {
      post("/api/batches", f.elements.namedItem("tasks").value, "start a batch", true);
    }
  });

  // The transcript.
  var events = document.getElementById("events");
  var live = document.getElementById("live");
  function line(kind, text, fold) {
    var li = el("li");
    li.appendChild(el("span", "kind", kind));
    if (fold) {
      var d = el("details");
      d.appendChild(el("summary", "text", text.split("\n")[0].slice(0, 120) + " … (" + text.length + " characters)"));
      d.appendChild(el("pre", "text", text));
      li.appendChild(d);
    } else {
      li.appendChild(el("span", "text", text));
    }
    events.appendChild(li);
  }
  function describe(ev) {
    switch (ev.type) {
      case "assistant_text": return ["text", ev.text];
      case "thinking": return ["thinking", ev.text || ""];
      case "tool_call": return ["tool", (ev.name || "") + " " + JSON.stringify(ev.input || {})];
      case "tool_result": return [ev.is_error ? "result (error)" : "result", String(ev.output || "")];
      case "error": return ["error " + (ev.error_kind || ""), ev.message || ""];
      case "question": return ["question", (ev.question || "") + (ev.options && ev.options.length ? "  [" + ev.options.join(" · ") + "]" : "")];
      case "final": return ["final", (ev.success ? "succeeded" : "failed") + (ev.text ? ": " + ev.text : "")];
      case "session_started": return ["session", ev.session_id || ""];
      case "usage": case "status": return null;
      default: return [ev.type || "event", ""];
    }
  }
  if (events && window.EventSource) {
    var es = new EventSource(events.getAttribute("data-src"));
    es.addEventListener("agent", function (m) {
      var ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      var d = describe(ev);
      if (d) {
        var fold = ev.type === "tool_result" && (d[1].length > 400 || d[1].split("\n").length > 6);
        line(d[0], d[1], fold);
      }
    });
    es.addEventListener("answer", function (m) {
      var a;
      try { a = JSON.parse(m.data); } catch (e) { return; }
      line("answer", a.answer || "");
    });
    es.onopen = function () { if (live) { live.textContent = "live"; } };
    es.onerror = function () { if (live) { live.textContent = "reconnecting…"; } };
  }

  function get(url) {
    return fetch(url, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) { throw new Error(r.status); }
      return r.json();
    });
  }
  // Parts of this page (by id) replaced by their state in a fresh copy of it; resolves to
  // the fresh document.
  function refreshParts(ids) {
    return fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          var now = document.getElementById(id), fresh = doc.getElementById(id);
          if (now && fresh) { now.replaceWith(document.adoptNode(fresh)); }
        });
        return doc;
      });
  }

  // The batch page: its rows every 2 s (the server's words and figures, as text), for as
  // long as it is open (a batch can be resumed from elsewhere). When a task's state
  // changes, and after its tasks are done until the batch's end is recorded, its buttons
  // and its overlaps are fetched again too.
  var tasks = document.getElementById("tasks");
  if (tasks) {
    var states = null, ended = tasks.getAttribute("data-ended") === "true";
    setInterval(function () {
      get(tasks.getAttribute("data-src")).then(function (rows) {
        var done = true, now = [];
        rows.forEach(function (r) {
          now.push(r.id + "=" + r.state);
          if (["queued", "running"].indexOf(r.state) >= 0) { done = false; }
          var row = tasks.querySelector('tr[data-task="' + CSS.escape(r.id) + '"]');
          if (!row) { return; }
          var st = row.querySelector("td.status");
          if (st.getAttribute("data-state") !== r.state) { st.setAttribute("data-state", r.state); }
          st.textContent = r.status;
          row.querySelector("td.runner").textContent = r.runner;
          row.querySelector("td.tokens").textContent = r.tokens;
          row.querySelector("td.cost").textContent = r.cost;
          row.querySelector("td.last").textContent = r.last;
        });
        now = now.join(" ");
        var changed = states !== null && states !== now;
        states = now;
        if (changed) { ended = false; }
        if (!changed && !(done && !ended)) { return; }
        return refreshParts(["controls", "ends"]).then(function (doc) {
          var fresh = doc.getElementById("tasks");
          ended = done && !!fresh && fresh.getAttribute("data-ended") === "true";
        });
      }).catch(function () {});
    }, 2000);
  }

  // The task page: its row every 2 s. When a figure of it changes, the page's summary
  // and details are fetched again; when its state changes, its controls too (not
  // before: an answer being written there stays). The transcript stays as it is.
  var state = document.getElementById("state");
  if (state) {
    var figures = null;
    setInterval(function () {
      get(state.getAttribute("data-src")).then(function (r) {
        state.textContent = r.status;
        var now = JSON.stringify([r.state, r.status, r.runner, r.tokens, r.cost]);
        if (figures === now) { return; }
        figures = now;
        var parts = ["summary", "details"];
        if (state.getAttribute("data-state") !== r.state) {
          state.setAttribute("data-state", r.state);
          parts.push("controls");
        }
        return refreshParts(parts);
      }).catch(function () {});
    }, 2000);
  }

  // The index: reloaded when the blocked tasks or the batches change, unless a form
  // is being filled in.
  var blocked = document.getElementById("blocked");
  if (blocked) {
    var seen = null;
    setInterval(function () {
      Promise.all([get("/api/blocked"), get("/api/batches")]).then(function (v) {
        var now = JSON.stringify(v);
        if (seen === null) { seen = now; return; }
        if (now === seen) { return; }
        var typing = Array.prototype.some.call(document.querySelectorAll("textarea, input"),
          function (i) { return i.value !== ""; });
        if (!typing && !document.querySelector("#action:not(:empty)")) { location.reload(); }
        seen = now;
      }).catch(function () {});
    }, 3000);
  }
})();
