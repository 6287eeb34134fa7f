(function () {
  var drawing = [];
  var config = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]};
  document.querySelectorAll("script[type='application/json'][id$='-data']").forEach(function (island) {
    var target = document.getElementById(island.id.slice(0, -5));
    if (!target) { console.error("traceview: no element for " + island.id); return; }
    var figure = JSON.parse(island.textContent);
    drawing.push(Plotly.newPlot(target, figure.data, figure.layout, config).then(function () {
      // a point that carries a drill-down address (`#cell=RANK-STEP`) opens that cell on a click
      target.on("plotly_click", function (event) {
        var link = event.points[0].customdata;
        if (typeof link === "string" && link.indexOf("#cell=") === 0) { window.location.hash = link.slice(1); }
      });
    }));
  });
  // every figure drawn and painted: the mark a reader (or a test) takes the page's load time from
  Promise.all(drawing).then(function () {
    requestAnimationFrame(function () {
      performance.mark("traceview-drawn");
      document.documentElement.dataset.drawn = "true";
    });
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
  var colours = data.colours;
  function esc(text) { return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
  function row(label, values) {
    var tr = document.createElement("tr");
    [label].concat(values.map(function (v) { return v === null ? "-" : v.toFixed(3); })).forEach(function (text, i) {
      var cell = document.createElement(i ? "td" : "th"); cell.textContent = text; tr.appendChild(cell);
    });
    return tr;
  }
  function bars(rank, step, y, legend) {
    var kept = (data.segments[String(step)] || {})[String(rank)] || [];
    return kept.map(function (s) {
      var first = !legend[s[1]]; legend[s[1]] = true;
      return {type: "bar", orientation: "h", y: [y], base: [s[2]], x: [s[3] - s[2]], name: s[1], showlegend: first, legendgroup: s[1],
        marker: {color: colours[s[1]] || colours.other, line: {width: 0}},
        offset: (data.lanes[s[0]] || data.lanes.comm)[0], width: (data.lanes[s[0]] || data.lanes.comm)[1],
        hovertext: esc(s[1]) + ": " + s[2].toFixed(3) + " to " + s[3].toFixed(3) + " ms" +
          (s[4] > 0 && s[5] >= 0 ? "<br>" + s[4] + " event(s); longest: " + esc(data.kernel_names[s[5]].slice(0, 120)) : ""),
        hovertemplate: "%{hovertext}<extra>" + y + "</extra>"};
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
    var legend = {};
    var traces = bars(rank, step, "rank " + rank, legend).concat(bars(median, step, "rank " + median + " (median)", legend));
    var target = document.getElementById("drill-timeline");
    if (traces.length) {
      Plotly.react(target, traces, {barmode: "overlay", height: 280, margin: {l: 130, r: 20, t: 64, b: 40},
        legend: {orientation: "h", x: 0, y: -0.35},
        title: {text: "Step " + step + ": rank " + rank + " against the median rank", x: 0, xanchor: "left",
                yref: "container", y: 1, yanchor: "top", pad: {t: 30}, font: {size: 13}},
        xaxis: {title: {text: "ms since the step began (aligned clocks)"}}, yaxis: {type: "category", autorange: "reversed"}},
        {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"]});
    } else {
      Plotly.purge(target);
      target.textContent = "The timeline kept other steps or ranks: the figures above are this cell's.";
    }
    document.getElementById("drill-detail").dataset.cell = key;
  }
  heat.on("plotly_click", function (event) {
    var point = event.points[0]; show(point.y, point.x);
  });
  function pickMetric(name) {
    var buttons = heat.layout.updatemenus[0].buttons;
    var index = data.metrics.indexOf(name);
    if (index < 0) { return; }
    Plotly.update(heat, buttons[index].args[0], Object.assign({"updatemenus[0].active": index}, buttons[index].args[1]));
  }
  function fromHash() {
    var cell = /cell=(-?\d+)-(-?\d+)/.exec(window.location.hash);
    var metric = /heatmap=(\w+)/.exec(window.location.hash);
    if (metric) { pickMetric(metric[1]); }
    if (cell) { show(Number(cell[1]), Number(cell[2])); }
    if (cell || metric) { document.getElementById(cell ? "drill-detail" : "fig-heatmap").scrollIntoView(); }
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
