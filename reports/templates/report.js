(function () {
  document.querySelectorAll("script[type='application/json'][id$='-data']").forEach(function (island) {
    var target = document.getElementById(island.id.slice(0, -5));
    if (!target) { console.error("traceview: no element for " + island.id); return; }
    var figure = JSON.parse(island.textContent);
    Plotly.newPlot(target, figure.data, figure.layout, {responsive: true, displaylogo: false});
  });
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () {
      var index = Array.prototype.indexOf.call(th.parentNode.children, th);
      var body = th.closest("table").tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var ascending = th.dataset.order !== "asc";
      th.parentNode.querySelectorAll("th").forEach(function (other) { delete other.dataset.order; });
      th.dataset.order = ascending ? "asc" : "desc";
      rows.sort(function (a, b) {
        var x = a.cells[index].textContent, y = b.cells[index].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        var cmp = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
        return ascending ? cmp : -cmp;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
})();
