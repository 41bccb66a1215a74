/* actdiff index: find an op key of a rank and jump to its row.
   A rank's key index (a line of keys-B.js, which holds those of ranks
   64·B to 64·B+63) is loaded only when the box is used, by adding a script
   element (src: the rank option's data-keys), so it works from file:// and
   offline. Each line calls actdiffKeys({rank, per, page, anchor, rows,
   keys}), so loading a file for one rank loads its block's; page and anchor are the
   parts of the page file and row anchor names (src/report/files.rs); keys
   holds one line per key of each row shown on the pages, in page order,
   front-coded: "P:SUFFIX" starts the next row (the previous key's first P
   characters, then SUFFIX), "P;SUFFIX" is another key of the same row.
   On an index of rank groups the list offers the groups' ranks only; any
   other rank is typed by number (#find-any), its file looked up by block
   in the data-files map the index writer made (data-per ranks a file).
   Results are built with textContent: no key text ever becomes markup. */
(function () {
  "use strict";
  var box = document.getElementById("find-key");
  var sel = document.getElementById("find-rank");
  var status = document.getElementById("find-status");
  var list = document.getElementById("find-results");
  if (!box || !sel || !status || !list) return;
  var MAX = 50, data = {}, loading = {}, timer = null, jump = false;
  var any = document.getElementById("find-any");
  var files = any ? JSON.parse(any.getAttribute("data-files") || "{}") : {};
  var per = any ? Number(any.getAttribute("data-per")) || 64 : 64;

  /* The rank searched, and the file of its key index ("" if none): the
     number typed into #find-any when there is one, else the list's. */
  function current() {
    if (any && any.value.trim() !== "") {
      var r = Number(any.value);
      if (!(r >= 0) || Math.floor(r) !== r) return { rank: any.value.trim(), src: "", bad: true };
      return { rank: String(r), src: files[String(Math.floor(r / per))] || "" };
    }
    var o = sel.options[sel.selectedIndex];
    return { rank: sel.value, src: o ? o.getAttribute("data-keys") : "" };
  }

  /* Says that rank `rank` has no key index to search. */
  function none(rank) {
    status.className = "mut";
    status.textContent = "rank " + rank + " has no key index: not a rank of this comparison, a rank of one run only, or one without result pages";
  }

  window.actdiffKeys = function (d) {
    var text = d.keys, keys = [], pos = [], prev = "", k = -1, i = 0, n = text.length;
    while (i < n) {
      var end = text.indexOf("\n", i);
      if (end < 0) end = n;
      var j = i, p = 0;
      while (j < end) {
        var c = text.charCodeAt(j);
        if (c < 48 || c > 57) break;
        p = p * 10 + (c - 48);
        j += 1;
      }
      if (j > i && j < end) {
        if (text.charAt(j) !== ";") k += 1;
        prev = prev.slice(0, p) + text.slice(j + 1, end);
        keys.push(prev);
        pos.push(k);
      }
      i = end + 1;
    }
    data[d.rank] = { per: d.per, page: d.page, anchor: d.anchor, rows: d.rows, keys: keys, low: null, pos: pos };
    delete loading[d.rank];
    if (String(d.rank) === current().rank) {
      search();
      if (jump) open1();
    }
  };

  /* Opens the first result (Enter). */
  function open1() {
    jump = false;
    var a = list.querySelector("a");
    if (a) location.href = a.href;
  }

  function load(c) {
    var rank = c.rank;
    if (data[rank] || loading[rank]) return;
    if (!c.src) { none(rank); return; }
    loading[rank] = true;
    var s = document.createElement("script");
    s.src = c.src;
    /* A file of 64 ranks' key indexes that lacks this one's. */
    s.onload = function () {
      if (data[rank]) return;
      delete loading[rank];
      if (current().rank === rank) none(rank);
    };
    s.onerror = function () {
      delete loading[rank];
      status.className = "err";
      status.textContent = "could not load " + s.src.split("/").pop();
    };
    document.head.appendChild(s);
  }

  function href(rank, d, k) {
    var row = d.rows ? d.rows[k] : k;
    var page = Math.floor(k / d.per) + 1;
    return { href: d.page[0] + page + d.page[1] + "#" + d.anchor + row, row: row, page: page };
  }

  function search() {
    var c = current(), q = box.value.trim().toLowerCase(), rank = c.rank;
    list.textContent = "";
    if (!q) { status.className = "mut"; status.textContent = ""; return; }
    var d = data[rank];
    if (!d) {
      if (c.bad) { status.className = "err"; status.textContent = "\u201c" + rank + "\u201d is not a rank number"; return; }
      if (!c.src) { none(rank); return; }
      status.className = "mut";
      status.textContent = "loading the keys of rank " + rank + "…";
      load(c);
      return;
    }
    if (!d.low) d.low = d.keys.map(function (k) { return k.toLowerCase(); });
    var found = 0, shown = {}, frag = document.createDocumentFragment();
    function add(i) {
      var k = d.pos[i];
      if (shown[k]) return;
      shown[k] = true;
      found += 1;
      if (found > MAX) return;
      var t = href(rank, d, k), li = document.createElement("li"), a = document.createElement("a");
      a.href = t.href;
      a.textContent = d.keys[i];
      var meta = document.createElement("span");
      meta.className = "mut";
      meta.textContent = " row " + t.row + " · page " + t.page;
      li.appendChild(a);
      li.appendChild(meta);
      frag.appendChild(li);
    }
    /* Keys equal to the query first, then those containing it, in page order. */
    var i;
    for (i = 0; i < d.low.length; i++) if (d.low[i] === q) add(i);
    for (i = 0; i < d.low.length; i++) if (d.low[i] !== q && d.low[i].indexOf(q) >= 0) add(i);
    list.appendChild(frag);
    status.className = "mut";
    status.textContent = found === 0
      ? (d.rows ? "no diverging row of rank " + rank + " has such a key (the pages hold only diverging rows; every row: --html-rows all)"
                : "no key of rank " + rank + " contains it")
      : found + " row" + (found === 1 ? "" : "s") + (found > MAX ? " (first " + MAX + " listed)" : "") + " · Enter opens the first";
  }

  box.addEventListener("focus", function () { if (current().src) load(current()); });
  box.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(search, 60); });
  box.addEventListener("keydown", function (e) {
    if (e.key !== "Enter") return;
    clearTimeout(timer);
    search();
    if (data[current().rank]) open1(); else jump = true;
  });
  sel.addEventListener("change", function () { if (any) any.value = ""; search(); });
  if (any) any.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(search, 60); });
  if (box.value) search();
})();
