// Live refresh: every few seconds, fetch this page again and swap in the
// parts marked data-live (tables, facts, plots). Forms are never replaced,
// so nothing typed is lost. Paused while the tab is hidden or "live" is off.
"use strict";
(function () {
  const PERIOD_MS = 5000;
  let busy = false;

  function liveEnabled() {
    const box = document.getElementById("live");
    return !document.hidden && (!box || box.checked);
  }

  async function refresh() {
    if (busy || !liveEnabled() || !document.querySelector("[data-live][id]")) {
      return;
    }
    busy = true;
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) {
        return;
      }
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      for (const current of document.querySelectorAll("[data-live][id]")) {
        const replacement = fresh.getElementById(current.id);
        if (replacement) {
          current.replaceWith(document.importNode(replacement, true));
        }
      }
      document.body.dataset.refreshedAt = String(Date.now());
    } catch (error) {
      // The broker may be restarting; try again at the next tick.
    } finally {
      busy = false;
    }
  }

  window.setInterval(refresh, PERIOD_MS);
})();
