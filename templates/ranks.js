/* actdiff index: the table of every rank, on an index that lists rank
   groups (src/report/html/index.rs, INDEX_FULL_RANKS). The table is in parts
   (ranks-K.js, RANK_TABLE_PART ranks each, by rank number); a part is loaded
   only when shown, by adding a script element, so it works from file:// and
   offline. It calls actdiffRanks(K, rows); a row is {r, r2, e: [entries per
   run], c: [count per status column], d: diverged, fd: [first diverging
   row, href] or null, fc: first cause or null, p: [page files], np: pages}.
   A page that sets cfg.row (the series index's strip of every rank, one
   row of cells per rank: src/report/html/steps.rs) draws its own rows
   with cfg.row(tr, row). Cells are built with textContent: no log text ever becomes markup. */
(function () {
  "use strict";
  var cfg = window.actdiffRankTable;
  var body = document.getElementById("rk-body");
  var input = document.getElementById("rk-go");
  var status = document.getElementById("rk-status");
  var prev = document.getElementById("rk-prev");
  var next = document.getElementById("rk-next");
  if (!cfg || !body || !input || !status || !prev || !next || !cfg.parts.length) return;
  var parts = {}, cur = -1, want = null;

  window.actdiffRanks = function (k, rows) {
    parts[k] = rows;
    if (k === cur) draw();
  };

  function partOf(rank) {
    var k = 0;
    for (var i = 0; i < cfg.starts.length; i++) if (cfg.starts[i] <= rank) k = i;
    return k;
  }

  function show(k, rank) {
    if (k < 0 || k >= cfg.parts.length) return;
    cur = k;
    want = rank;
    if (parts[k]) { draw(); return; }
    status.textContent = "loading " + cfg.parts[k] + " …";
    var s = document.createElement("script");
    s.src = cfg.parts[k];
    s.onerror = function () { status.textContent = "could not load " + cfg.parts[k]; };
    document.head.appendChild(s);
  }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function link(parent, text, href) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    parent.appendChild(a);
  }

  function draw() {
    var rows = parts[cur], hit = null;
    body.textContent = "";
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      tr.id = "rk-" + r.r;
      if (cfg.row) cfg.row(tr, r); else rankRow(tr, r);
      body.appendChild(tr);
      if (r.r === want) hit = tr;
    });
    status.textContent = "ranks " + rows[0].r + "–" + rows[rows.length - 1].r +
      " (part " + (cur + 1) + " of " + cfg.parts.length + ")";
    if (want !== null) {
      if (hit) {
        hit.classList.add("hit");
        hit.scrollIntoView({ block: "center" });
      } else {
        status.textContent += ": rank " + want + " was not compared";
      }
    }
    prev.disabled = cur <= 0;
    next.disabled = cur >= cfg.parts.length - 1;
  }

  /* A line of the index's table of every rank (the default; the series
     index draws its strip's rows with cfg.row(tr, r) instead). */
  function rankRow(tr, r) {
      if (r.d) tr.className = "diverged";
      cell(tr, r.r2 !== r.r ? r.r + " ↔ " + r.r2 : String(r.r), "rk");
      cell(tr, r.e[0] + " / " + r.e[1], "num");
      r.c.forEach(function (n) { cell(tr, String(n), "num"); });
      var fd = cell(tr, "", "fdc");
      if (!r.fd) {
        var none = document.createElement("span");
        none.className = "mut";
        none.textContent = "none";
        fd.appendChild(none);
      } else if (r.fd[1]) {
        link(fd, r.fd[0], r.fd[1]);
      } else {
        fd.textContent = r.fd[0];
      }
      if (r.fc) {
        var c = document.createElement("div");
        c.className = "fc";
        c.textContent = r.fc;
        fd.appendChild(c);
      }
      var pg = cell(tr, "", "pg");
      r.p.forEach(function (f, i) {
        link(pg, String(i + 1), f);
        pg.appendChild(document.createTextNode(" "));
      });
      if (r.np > r.p.length) pg.appendChild(document.createTextNode("… " + r.np + " pages"));
  }

  /* Shows rank `rank`'s part, the rank marked (e.g. from a link). */
  window.actdiffShowRank = function (rank) {
    input.value = rank;
    show(partOf(rank), rank);
  };

  input.addEventListener("change", function () {
    var v = parseInt(input.value, 10);
    if (!isNaN(v)) show(partOf(v), v);
  });
  prev.addEventListener("click", function () { show(cur - 1, null); });
  next.addEventListener("click", function () { show(cur + 1, null); });
  show(0, null);
})();
