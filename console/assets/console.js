// The console's only script: times in the browser's zone, copy buttons,
// confirmations, and the live trace of a session page (EventSource).
// Everything the server sends is inserted as text, never as HTML.
"use strict";
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var iso = t.getAttribute("datetime");
      var d = new Date(iso);
      if (!iso || isNaN(d.getTime())) return;
      t.textContent = d.toLocaleString();
      t.title = iso;
    });
  }

  function copyButtons() {
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      b.addEventListener("click", function () {
        var source = document.getElementById(b.dataset.copy);
        if (!source) return;
        var done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1500); };
        if (navigator.clipboard) {
          navigator.clipboard.writeText(source.textContent).then(done, function () {});
        } else {
          var range = document.createRange();
          range.selectNodeContents(source);
          var sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
        }
      });
    });
  }

  function confirmations() {
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.dataset.confirm)) e.preventDefault();
      });
    });
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  function json(v) {
    try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); }
  }

  function brief(args) {
    var s = "";
    try { s = JSON.stringify(args); } catch (_) { s = ""; }
    if (!s || s === "{}") return "()";
    return "(" + (s.length > 90 ? s.slice(0, 87) + "…" : s) + ")";
  }

  function link(href, text) {
    var a = el("a", null, text);
    a.href = href;
    return a;
  }

  // The objects (objectId, object_id) a call's arguments or a result name,
  // each once, at most 20, found at most five levels deep.
  var OBJECT_ID = /^[A-Za-z0-9_.-]{1,64}$/;
  function objectsIn(value) {
    var found = [];
    (function walk(v, depth) {
      if (!v || typeof v !== "object" || depth > 5 || found.length >= 20) return;
      Object.keys(v).forEach(function (k) {
        var x = v[k];
        if ((k === "objectId" || k === "object_id") && typeof x === "string" && OBJECT_ID.test(x)) {
          if (found.indexOf(x) < 0 && found.length < 20) found.push(x);
        } else {
          walk(x, depth + 1);
        }
      });
    })(value, 0);
    return found;
  }

  // A line of links to the object pages of what `value` names, or null.
  function objectLinks(value, brokerId) {
    var ids = objectsIn(value);
    if (!ids.length) return null;
    var line = el("div", "objects-mentioned", "objects: ");
    var query = brokerId && brokerId !== "ztf-archive" ? "?broker=" + encodeURIComponent(brokerId) : "";
    ids.forEach(function (id) {
      var a = link("/console/objects/" + encodeURIComponent(id) + query, id);
      a.className = "object-link";
      line.appendChild(a);
    });
    return line;
  }

  var TYPES = ["session_open", "reasoning", "tool_call", "tool_result", "strategy_proposed",
    "run_transition", "denial", "call_error", "approval", "session_closed"];

  function liveTrace() {
    var list = document.getElementById("trace");
    if (!list) return;
    var state = document.getElementById("live-state");
    var empty = document.getElementById("trace-empty");
    var lastSeq = 0;
    var ended = false;
    var pending = {}; // tool name -> calls still waiting for their result
    var setState = function (text, cls) { state.textContent = text; state.className = "live " + (cls || ""); };

    function item(ev, label) {
      var li = el("li", "event type-" + ev.type);
      li.dataset.seq = ev.seq;
      li.id = "seq-" + ev.seq;
      var head = el("div", "event-head");
      head.appendChild(el("span", "seq", "#" + ev.seq));
      head.appendChild(el("span", "type", label || ev.type));
      var t = el("time", null, ev.created_at);
      t.setAttribute("datetime", ev.created_at);
      head.appendChild(t);
      li.appendChild(head);
      return li;
    }

    function render(ev) {
      var p = ev.payload || {};
      var li;
      switch (ev.type) {
        case "tool_call": {
          li = item(ev, "tool call");
          var d = el("details", "call");
          var s = el("summary");
          s.appendChild(el("code", "tool", p.name));
          s.appendChild(el("span", "args-brief", brief(p.arguments)));
          s.appendChild(el("span", "outcome running", "running…"));
          d.appendChild(s);
          d.appendChild(el("pre", "args", json(p.arguments || {})));
          li.appendChild(d);
          var named = objectLinks(p.arguments, (p.arguments || {}).broker_id);
          if (named) li.appendChild(named);
          (pending[p.name] = pending[p.name] || []).push(li);
          break;
        }
        case "tool_result": {
          var call = (pending[p.name] || []).shift();
          var failed = p.outcome === "error";
          var text = failed ? "error " + (p.error || "") : "ok";
          if (typeof p.duration_ms === "number") text += " · " + p.duration_ms + " ms";
          var res = el("div", "result");
          res.dataset.seq = ev.seq;
          res.id = "seq-" + ev.seq;
          res.appendChild(el("span", "seq", "#" + ev.seq + " result"));
          res.appendChild(el("pre", "args", json(p)));
          var inResult = objectLinks(p, null);
          if (inResult) res.appendChild(inResult);
          if (call) {
            var out = call.querySelector(".outcome");
            out.textContent = text;
            out.className = "outcome " + (failed ? "bad" : "good");
            call.querySelector("details").appendChild(res);
            if (failed) call.classList.add("is-error");
            return;
          }
          li = item(ev, "tool result");
          li.appendChild(el("code", "tool", p.name));
          li.appendChild(el("span", "outcome " + (failed ? "bad" : "good"), " " + text));
          if (failed) li.classList.add("is-error");
          break;
        }
        case "reasoning":
          li = item(ev, p.source === "session_context" ? "prompt" : "reasoning");
          li.appendChild(el("div", "prose", p.prompt || p.text || json(p)));
          break;
        case "session_open":
          li = item(ev, "session opened");
          li.appendChild(el("div", null, "by " + (p.actor || "agent") + " " + (p.agent_id || "")));
          break;
        case "run_transition": {
          li = item(ev, "run");
          var line = el("div");
          line.appendChild(link("/console/runs/" + encodeURIComponent(p.run_id || ""), p.skill_id || "run"));
          line.appendChild(document.createTextNode(" " + (p.from || "") + " → " + (p.to || "")));
          li.appendChild(line);
          if (p.error || p.to === "failed") { li.classList.add("is-error"); if (p.error) li.appendChild(el("div", "error", p.error)); }
          break;
        }
        case "approval": {
          li = item(ev, "approval " + (p.status || ""));
          var a = el("div");
          a.appendChild(link("/console/approvals/" + encodeURIComponent(p.approval_id || ""), (p.tool || "approval") + " " + (p.status || "")));
          if (p.note) a.appendChild(document.createTextNode(" — " + p.note));
          li.appendChild(a);
          if (p.status === "pending") li.classList.add("is-pending");
          if (p.status === "denied" || p.status === "failed" || p.status === "expired") li.classList.add("is-error");
          break;
        }
        case "denial":
        case "error":
          li = item(ev, ev.type === "denial" ? "denied" : "error");
          li.classList.add("is-error");
          li.appendChild(el("div", "error", (p.tool ? p.tool + ": " : "") + (p.error || p.message || "")));
          li.appendChild(el("pre", "args", json(p)));
          break;
        case "session_closed":
          li = item(ev, "session closed");
          li.appendChild(el("div", null, "closed by " + (p.closed_by || "?")));
          ended = true;
          var badge = document.getElementById("session-status");
          if (badge) { badge.textContent = "closed"; badge.className = "badge st-closed"; }
          ["close-form"].forEach(function (id) { var x = document.getElementById(id); if (x) x.remove(); });
          document.querySelectorAll("details.join").forEach(function (x) { x.remove(); });
          break;
        default:
          li = item(ev);
          li.appendChild(el("pre", "args", json(p)));
      }
      list.appendChild(li);
      localTimes(li);
    }

    var source = new EventSource(list.dataset.stream);
    var onEvent = function (msg) {
      var ev;
      try { ev = JSON.parse(msg.data); } catch (_) { return; }
      // Replays after a reconnect start after Last-Event-ID; anything at or
      // below the last seq shown is a duplicate and is dropped.
      if (typeof ev.seq !== "number" || ev.seq <= lastSeq) return;
      lastSeq = ev.seq;
      list.dataset.lastSeq = lastSeq;
      if (empty) { empty.remove(); empty = null; }
      render(ev);
    };
    TYPES.forEach(function (t) { source.addEventListener(t, onEvent); });
    source.onmessage = onEvent;
    source.onopen = function () { setState(ended ? "ended" : "live", ended ? "" : "on"); };
    source.onerror = function (e) {
      // An older edge names a failed call's event `error`, which reaches
      // here as a message with data: show it, the connection is fine.
      if (e && typeof e.data === "string") { onEvent(e); return; }
      if (ended) {
        source.close();
        setState("ended: the session is closed", "");
      } else if (source.readyState === EventSource.CLOSED) {
        // Refused outright (signed out, key revoked): reload to sign in.
        setState("stopped: reload the page to sign in again", "off");
      } else {
        setState("reconnecting…", "off");
      }
    };
  }

  localTimes(document);
  copyButtons();
  confirmations();
  liveTrace();
})();
