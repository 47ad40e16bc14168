// tracehouse report pages: sortable tables, row filters, kernel names that expand on click.
// Loaded inline under a strict CSP that allows exactly this script (by its sha256); no network.
(function () {
  function key(cell) {
    var v = cell.getAttribute("data-v");
    if (v !== null && v !== "" && !isNaN(parseFloat(v))) { return parseFloat(v); }
    return cell.textContent.trim().toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, i) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var dir = th.getAttribute("aria-sort") === "descending" ? 1 : -1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        rows.sort(function (a, b) {
          var x = key(a.cells[i]), y = key(b.cells[i]);
          if (typeof x === "number" && typeof y === "number") { return dir * (x - y); }
          return dir * String(x).localeCompare(String(y));
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll("input.filter").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () {
      var q = input.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.style.display = !q || row.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
  });
  document.querySelectorAll("[data-full]").forEach(function (cell) {
    cell.addEventListener("click", function () {
      var open = cell.classList.toggle("open");
      var span = cell.querySelector(".nm");
      span.textContent = open ? cell.getAttribute("data-full") : cell.getAttribute("data-short");
    });
  });
})();
