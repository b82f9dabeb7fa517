// The console's live refresh: a page whose <main> has data-refresh="SECONDS" reads itself
// again that often and puts the new <main> in place of the old, while its tab is shown and
// no field of it is being typed in. A file of the console's own origin, so the pages'
// Content-Security-Policy (script-src 'self', connect-src 'self') allows it; no inline code.
(function () {
  "use strict";
  const main = document.querySelector("main[data-refresh]");
  if (!main) {
    return;
  }
  const every = Math.max(2, Number(main.dataset.refresh) || 10) * 1000;

  function typing() {
    const active = document.activeElement;
    return active !== null && main.contains(active) && active.matches("input, select, textarea");
  }

  async function refresh() {
    if (document.hidden || typing()) {
      return;
    }
    const answer = await fetch(window.location.href, { credentials: "same-origin" });
    if (!answer.ok || answer.redirected) {
      return; // signed out or refused: the next navigation shows why
    }
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.querySelector("main");
    if (fresh !== null) {
      main.replaceChildren(...fresh.childNodes);
      main.dataset.refreshed = String(Date.now());
    }
  }

  window.setInterval(function () {
    refresh().catch(function () {}); // a failed read leaves the page as it was
  }, every);
})();
