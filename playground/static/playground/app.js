// Small progressive enhancements; every page works without this file.
(function () {
  "use strict";
  // What only holds with scripts on ("updating live") shows only then (.js-only).
  document.documentElement.classList.remove("no-js");

  // Filter a checkbox list by what is typed in its search box (data-filter="<list id>").
  function bindFilters(root) {
    root.querySelectorAll("input[data-filter]").forEach(function (box) {
      if (box.dataset.bound) return;
      box.dataset.bound = "1";
      // Enter in the box filters; it must not submit the form around it (a real run).
      box.addEventListener("keydown", function (event) {
        if (event.key === "Enter") event.preventDefault();
      });
      box.addEventListener("input", function () {
        var list = document.getElementById(box.dataset.filter);
        if (!list) return;
        var needle = box.value.trim().toLowerCase();
        list.querySelectorAll("[data-search]").forEach(function (item) {
          item.hidden = needle !== "" && item.dataset.search.indexOf(needle) === -1;
        });
      });
    });
  }

  // Count down to an absolute time given in a <time datetime> with data-countdown.
  function tickCountdowns() {
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("datetime")) - Date.now()) / 1000);
      var out = el.parentElement.querySelector("[data-countdown-left]");
      if (!out) return;
      if (left <= 0) { out.textContent = "expired"; return; }
      var h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
      out.textContent = (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s left";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    bindFilters(document);
    tickCountdowns();
    setInterval(tickCountdowns, 1000);
  });
  document.addEventListener("htmx:afterSettle", function (event) { bindFilters(event.target); });
})();
