// The admin console's only script (the Content-Security-Policy allows no inline script).
// Everything works without it; it only adds conveniences.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // A refused write: put the keyboard on the field at fault.
  const invalid = document.querySelector("[aria-invalid='true']");
  if (invalid) invalid.focus();

  // The edit form: mark the inputs that differ from what the layer stores.
  for (const input of document.querySelectorAll("form.policy input, form.policy select")) {
    const initial = input.value;
    input.addEventListener("input", () => {
      input.classList.toggle("changed", input.value !== initial);
    });
  }

  // Spills: open one in place, fetched only when asked for.
  for (const link of document.querySelectorAll("a.spill-link")) {
    link.addEventListener("click", async (event) => {
      event.preventDefault();
      const row = link.closest("tr");
      const next = row.nextElementSibling;
      if (next && next.classList.contains("spill-row")) {
        next.remove();
        link.setAttribute("aria-expanded", "false");
        return;
      }
      const response = await fetch(link.href, {credentials: "same-origin"});
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const content = page.querySelector("pre.spill");
      const opened = document.createElement("tr");
      opened.className = "spill-row";
      const cell = document.createElement("td");
      cell.colSpan = row.children.length;
      const pre = document.createElement("pre");
      pre.className = "spill";
      pre.textContent = content ? content.textContent : "This spill could not be read.";
      cell.appendChild(pre);
      opened.appendChild(cell);
      row.after(opened);
      link.setAttribute("aria-expanded", "true");
    });
  }
});
