// Progressive enhancement only: every page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A header checkbox that ticks every row's box of the same name.
  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    var name = all.getAttribute("data-select-all");
    all.addEventListener("change", function () {
      all.form.querySelectorAll('input[type="checkbox"][name="' + name + '"]').forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
  // A form is sent once: its button is disabled while the action runs.
  document.querySelectorAll("form[method=post]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("button[type=submit]").forEach(function (b) {
        b.disabled = true;
        b.textContent = "Working…";
      });
    });
  });
});
