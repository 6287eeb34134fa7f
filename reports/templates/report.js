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
(function () {
  var island = document.getElementById("drilldown-cells");
  var heat = document.getElementById("fig-heatmap");
  if (!island || !heat || !window.Plotly) { return; }
  var data = JSON.parse(island.textContent);
  var colours = {idle: "#dfe3e8", memory: "#CC79A7", compute: "#009E73"};
  function row(label, values) {
    var tr = document.createElement("tr");
    [label].concat(values.map(function (v) { return v === null ? "-" : v.toFixed(3); })).forEach(function (text, i) {
      var cell = document.createElement(i ? "td" : "th"); cell.textContent = text; tr.appendChild(cell);
    });
    return tr;
  }
  function bars(rank, step, y) {
    var kept = (data.segments[String(step)] || {})[String(rank)] || [];
    return kept.map(function (s) {
      return {type: "bar", orientation: "h", y: [y], base: [s[2]], x: [s[3] - s[2]], name: s[1], showlegend: false,
        marker: {color: colours[s[1]] || "#E69F00"}, width: s[0] === "comm" ? 0.35 : 0.8,
        hovertemplate: s[1] + ": %{base:.3f} to %{x:.3f} ms<extra>" + y + "</extra>"};
    });
  }
  function show(rank, step) {
    var key = rank + "-" + step, figures = data.cells[key];
    var caption = document.getElementById("drill-caption");
    if (!figures) { caption.textContent = "No figures for rank " + rank + ", step " + step + "."; return; }
    var median = data.median_rank[String(step)];
    caption.textContent = "Rank " + rank + ", step " + step + " against the median rank of that step (rank " + median + "), ms:";
    var table = document.getElementById("drill-table");
    table.innerHTML = "";
    table.appendChild(row("", [])).querySelectorAll("th");
    var head = table.rows[0]; data.columns.forEach(function (name) { var th = document.createElement("th"); th.textContent = name; head.appendChild(th); });
    table.appendChild(row("rank " + rank, figures));
    table.appendChild(row("rank " + median + " (median)", data.cells[median + "-" + step] || []));
    var traces = bars(rank, step, "rank " + rank).concat(bars(median, step, "rank " + median + " (median)"));
    var target = document.getElementById("drill-timeline");
    if (traces.length) {
      Plotly.react(target, traces, {barmode: "overlay", height: 220, margin: {l: 130, r: 20, t: 30, b: 40},
        title: {text: "Step " + step + ": rank " + rank + " against the median rank", x: 0, font: {size: 13}},
        xaxis: {title: {text: "ms since the step began (aligned clocks)"}}, yaxis: {type: "category", autorange: "reversed"}},
        {responsive: true, displaylogo: false});
    } else {
      Plotly.purge(target);
      target.textContent = "The timeline kept other steps or ranks: the figures above are this cell's.";
    }
    document.getElementById("drill-detail").dataset.cell = key;
  }
  heat.on("plotly_click", function (event) {
    var point = event.points[0]; show(point.y, point.x);
  });
  function fromHash() {
    var found = /cell=(-?\d+)-(-?\d+)/.exec(window.location.hash);
    if (found) { show(Number(found[1]), Number(found[2])); document.getElementById("drilldown").scrollIntoView(); }
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
