// Draws the campaign page's charts from the JSON the page embeds (outreach report --json).
// Unknown Postmaster days are null: Chart.js leaves a gap (spanGaps: false), never a 0.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var opts = { responsive: true, maintainAspectRatio: false, animation: false };
  var funnelKeys = ["enrolled", "queued", "sent", "replied", "bounced", "unsubscribed",
                    "unconfirmed", "failed"];
  document.querySelectorAll("canvas[data-funnel]").forEach(function (canvas) {
    var steps = data.funnel.filter(function (f) { return f.campaign === canvas.dataset.funnel; });
    new Chart(canvas, {
      type: "bar", options: opts,
      data: { labels: funnelKeys, datasets: steps.map(function (f) {
        return { label: "step " + f.step, data: funnelKeys.map(function (k) { return f[k]; }) };
      }) }
    });
  });
  function daysOf(id) {
    return data.days.filter(function (d) { return String(d.mailbox_id) === String(id); });
  }
  document.querySelectorAll("canvas[data-sends]").forEach(function (canvas) {
    var days = daysOf(canvas.dataset.sends);
    new Chart(canvas, {
      data: { labels: days.map(function (d) { return d.day; }), datasets: [
        { type: "bar", label: "sent", data: days.map(function (d) { return d.sent; }) },
        { type: "line", label: "daily cap", data: days.map(function (d) { return d.daily_cap; }),
          pointRadius: 0 },
        { type: "line", label: "warm-up limit", data: days.map(function (d) { return d.daily_limit; }),
          pointRadius: 0, borderDash: [6, 3] }
      ] }, options: opts
    });
  });
  document.querySelectorAll("canvas[data-spam]").forEach(function (canvas) {
    var days = daysOf(canvas.dataset.spam);
    new Chart(canvas, {
      type: "line",
      data: { labels: days.map(function (d) { return d.day; }), datasets: [
        { label: "spam rate %", spanGaps: false,
          data: days.map(function (d) { return d.spam_rate === null ? null : d.spam_rate * 100; }) },
        { label: "pause threshold " + (data.threshold * 100) + " %", pointRadius: 0,
          borderDash: [4, 4], data: days.map(function () { return data.threshold * 100; }) }
      ] },
      options: Object.assign({}, opts, { scales: { y: { beginAtZero: true } } })
    });
  });
  document.body.dataset.chartsReady = "yes";
})();
