/* actdiff result page: draws the rows from the page's JSON (#rows), then
   status filters, key regex filter, clipped cells, fragment targets. */
(function () {
  "use strict";
  var body = document.body;

  /* Rows: the JSON written by src/report/rowdata.rs. Every string from it
     is escaped before it goes into markup. */
  var ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  function esc(s) { return String(s).replace(/[&<>"']/g, function (c) { return ESC[c]; }); }
  /* The data cells of a side, and Location's position among them: set from
     each table's data-cols and data-loc (src/report/rowdata.rs's COLUMNS). */
  var NCOL = 0, LOC = -1;
  /* The status badges, by status: the page's writer puts one of each into
     <template id=badges> (src/report/html/markup.rs's badge, the only
     place they are written). */
  var BADGE = {}, bt = document.getElementById("badges");
  if (bt && bt.content) {
    Array.prototype.forEach.call(bt.content.children, function (b) {
      BADGE[b.classList[b.classList.length - 1]] = b.outerHTML;
    });
  }
  /* A cell's text; in Location, the line number (":152") never breaks. */
  function text(s, j) {
    var m = j === LOC ? /^([\s\S]*?)(:\d+)$/.exec(s) : null;
    return m ? esc(m[1]) + "<span class=ln>" + esc(m[2]) + "</span>" : esc(s);
  }
  function cell(c, j) {
    var loc = j === LOC ? "loc" : "";
    if (typeof c === "string") return "<td" + (loc ? " class=loc" : "") + ">" + text(c, j);
    var cls = c.x ? "x" + c.x : c.k || "", title = c.d || "";
    if (loc) cls = cls ? cls + " " + loc : loc;
    /* A value the parser could not read (it warned): not compared. */
    if (c.u) {
      cls = cls ? cls + " unreadable" : "unreadable";
      title = "unreadable value: not compared" + (title ? " · " + title : "");
    }
    var h = "<td";
    if (cls) h += ' class="' + esc(cls) + '"';
    if (title) h += ' title="' + esc(title) + '"';
    h += ">";
    if (c.m) return h + "\u2014";
    if (c.c) h += "<div class=c>";
    if (c.v) {
      h += c.v.map(function (v) {
        return v.p ? '<span title="produced by ' + esc(v.p) + '">' + esc(v.h) + "</span>" : esc(v.h);
      }).join(", ");
    } else {
      h += text(c.t || "", j);
    }
    if (c.c) h += "</div>";
    return h;
  }
  /* A run name: clipped where it does not fit, the full text on hover
     (src/report/html/markup.rs's clip). */
  function clip(t, cls) {
    return '<span class="clip' + (cls ? " " + cls : "") + '" title="' + esc(t) + '">' + esc(t) + "</span>";
  }
  function pair(p, n) {
    var h = '<tbody id="' + esc(p.id) + '" class="' + esc(p.st) + '"><tr><td rowspan=2 class=k title="' + esc(p.title) + '">';
    if (p.k2) {
      h += clip(n[0], "kn") + " <span class=kt>" + esc(p.k1) + "</span><br>" +
        clip(n[1], "kn") + " <span class=kt>" + esc(p.k2) + "</span>";
    } else {
      h += esc(p.k1);
    }
    h += "<br>";
    if (p.chip) h += '<i class="' + esc(p.sg) + '">' + esc(p.chip) + "</i>";
    h += BADGE[p.st] || "";
    (p.notes || []).forEach(function (t) { h += '<i class="' + esc(t[0]) + '">' + esc(t[1]) + "</i>"; });
    if (p.tol) h += "<i class=tl>" + esc(p.tol) + "</i>";
    if (p.nx) h += "<div class=nx>" + esc(p.nx) + "</div>";
    for (var i = 0; i < 2; i++) {
      if (i) h += "<tr>";
      h += "<td class=rn>" + clip(n[i], "");
      h += p.s[i] ? p.s[i].map(cell).join("") : "<td colspan=" + NCOL + " class=ms>\u2014";
    }
    return h + "</tbody>";
  }
  var data = document.getElementById("rows");
  if (data) {
    var d = JSON.parse(data.textContent);
    ["forward", "backward", "optimizer"].forEach(function (id) {
      var t = document.querySelector("#" + id + " table.res"), rows = d[id] || [];
      if (t && rows.length) {
        NCOL = +t.getAttribute("data-cols");
        LOC = +t.getAttribute("data-loc");
        t.insertAdjacentHTML("beforeend", rows.map(function (p) { return pair(p, d.n); }).join(""));
      }
    });
  }

  /* Status checkboxes: unchecked hides the rows of that status (CSS). */
  var boxes = document.querySelectorAll("#filters input[type=checkbox][data-st]");
  Array.prototype.forEach.call(boxes, function (cb) {
    var apply = function () { body.classList.toggle("hide-" + cb.getAttribute("data-st"), !cb.checked); };
    cb.addEventListener("change", apply);
    apply(); /* browsers restore checkbox state on reload */
  });

  /* Key regex filter: hides row pairs whose keys do not match. */
  var pairs = null;
  function allPairs() {
    if (pairs) return pairs;
    pairs = Array.prototype.map.call(document.querySelectorAll("table.res tbody[id]"), function (tb) {
      var k = tb.querySelector("td.k"), keys = [];
      if (k) {
        var parts = k.querySelectorAll(".kt");
        if (parts.length) {
          Array.prototype.forEach.call(parts, function (s) { keys.push(s.textContent); });
        } else if (k.firstChild && k.firstChild.nodeType === 3) {
          keys.push(k.firstChild.nodeValue); /* the key text, before the chips */
        }
      }
      return { el: tb, keys: keys };
    });
    return pairs;
  }
  var box = document.getElementById("re"), status = document.getElementById("re-status"), timer = null;
  function applyRegex() {
    var pat = box.value.trim(), re = null, list = allPairs(), kept = 0;
    if (pat) {
      try {
        re = new RegExp(pat, "i");
      } catch (err) {
        status.className = "err";
        status.textContent = "invalid regex: " + err.message;
        return;
      }
    }
    list.forEach(function (p) {
      var ok = !re || p.keys.some(function (k) { return re.test(k); });
      p.el.classList.toggle("fx", !ok);
      if (ok) kept += 1;
    });
    status.className = "mut";
    status.textContent = re ? kept + " / " + list.length + " rows match" : "";
  }
  if (box) {
    box.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(applyRegex, 80);
    });
    if (box.value) applyRegex();
  }

  /* Clipped cells (long hash lists, shapes) expand and collapse on click,
     unless the click ends a text selection. */
  document.addEventListener("click", function (e) {
    var t = e.target;
    var c = t && t.closest ? t.closest("div.c") : null;
    if (!c) return;
    var sel = window.getSelection ? String(window.getSelection()) : "";
    if (!sel) c.classList.toggle("open");
  });

  /* A coloured cell of run 1 shows the relative difference that run 2's
     cell of the same column holds in its title. */
  document.addEventListener("mouseover", function (e) {
    var t = e.target;
    var td = t && t.closest ? t.closest("table.res td[class^=x]") : null;
    if (!td || td.title) return;
    var tr = td.parentNode, other = tr.nextElementSibling;
    if (!other) return;
    var col = Array.prototype.indexOf.call(tr.children, td) - 1; /* the key cell */
    var o = other.children[col];
    if (o && o.title) td.title = o.title;
  });

  /* A #rankN-rowM fragment: open its section, unhide it, scroll to it. */
  function reveal() {
    var id = location.hash ? decodeURIComponent(location.hash.slice(1)) : "";
    var el = id ? document.getElementById(id) : null;
    if (!el) return;
    var d = el.closest ? el.closest("details") : null;
    if (d && !d.open) d.open = true;
    el.classList.remove("fx");
    Array.prototype.forEach.call(boxes, function (cb) {
      var st = cb.getAttribute("data-st");
      if (el.classList.contains(st) && !cb.checked) {
        cb.checked = true;
        body.classList.remove("hide-" + st);
      }
    });
    el.scrollIntoView({ block: "center" });
  }
  window.addEventListener("hashchange", reveal);
  if (location.hash) reveal();
})();
