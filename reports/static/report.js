// fencecheck report: draws the embedded plotly figures and links violation cards to the timeline.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("fc-data").textContent);
  var figs = data.figures;
  if (typeof Plotly === "undefined") {
    var p = document.createElement("p");
    p.className = "notice";
    p.textContent = "plotly.js was not found next to this report: plots are not shown.";
    document.getElementById("timeline").appendChild(p);
    window.fcReady = true;
    return;
  }
  var config = { responsive: true, displaylogo: false };
  var drawn = ["timeline", "latency", "throughput"].map(function (id) {
    return Plotly.newPlot(id, figs[id].data, figs[id].layout, config);
  });
  var timeline = document.getElementById("timeline");
  var baseShapes = figs.timeline.layout.shapes || [];

  function focus(t0, t1) {
    var pad = Math.max((t1 - t0) * 0.5, 0.02);
    var mark = {
      type: "rect", xref: "x", yref: "paper", x0: t0, x1: t1, y0: 0, y1: 1,
      line: { color: "#e53e3e", width: 2 }, fillcolor: "rgba(229,62,62,0.08)"
    };
    timeline.scrollIntoView({ block: "start" });
    return Plotly.relayout(timeline, {
      "xaxis.range": [t0 - pad, t1 + pad], shapes: baseShapes.concat([mark])
    });
  }
  window.fcFocus = focus;

  document.querySelectorAll("a.op-link").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      ev.preventDefault();
      focus(parseFloat(a.dataset.t0), parseFloat(a.dataset.t1));
      history.replaceState(null, "", "#timeline");
    });
  });

  Promise.all(drawn).then(function () {
    timeline.on("plotly_click", function (ev) {
      var pt = ev.points && ev.points[0];
      if (!pt || pt.customdata === undefined) return;
      var row = document.querySelector('tr[data-index="' + Number(pt.customdata) + '"]');
      if (!row) return;
      var folded = row.closest("details");
      if (folded) folded.open = true;
      row.scrollIntoView({ block: "center" });
      row.classList.add("flash");
      setTimeout(function () { row.classList.remove("flash"); }, 1500);
    });
    window.fcReady = true;
  });
})();
