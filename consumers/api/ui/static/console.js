// The console's live pages. A page whose <main> has data-refresh="SECONDS" (the overview, the
// audits, the dead letters, the deliveries) reads its own address again that often and puts
// the parts of the new <main> that changed in place of the old ones: a section that did not
// change is left alone, so what is not new neither flickers nor loses its place.
//
// Never under the user's hands: no read while the tab is hidden, while anything in <main> has
// the focus (a field being typed in, a link reached by keyboard), or while a form in it holds
// input not yet sent. A control before <main> pauses and resumes the updates; the choice is
// kept for the tab (sessionStorage), so it holds from page to page until resumed.
//
// A file of the console's own origin, so the pages' Content-Security-Policy (script-src 'self',
// connect-src 'self') allows it; no inline code, no handler in the markup. Without script the
// pages are plain pages, read again by reloading.
(function () {
  "use strict";
  const main = document.querySelector("main[data-refresh]");
  if (!main) {
    return;
  }
  const every = Math.max(2, Number(main.dataset.refresh) || 10) * 1000;
  const PAUSED = "auditrec.console.live-paused";
  let ticks = 0;
  let reading = false;
  let stopped = ""; // why updates stopped for good on this page (signed out)
  let waiting = ""; // why the last tick read nothing
  let updated = "";

  function paused() {
    try {
      return window.sessionStorage.getItem(PAUSED) === "1";
    } catch (e) {
      return false; // storage refused: never paused across pages
    }
  }
  let pausedHere = paused();

  function setPaused(on) {
    try {
      if (on) {
        window.sessionStorage.setItem(PAUSED, "1");
      } else {
        window.sessionStorage.removeItem(PAUSED);
      }
    } catch (e) {
      // storage refused: the choice lasts for this page only
    }
    pausedHere = on;
  }

  // The control: a line before <main>, outside what is replaced.
  const bar = document.createElement("div");
  bar.className = "live";
  bar.id = "live";
  const state = document.createElement("span");
  state.id = "live-state";
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.id = "live-toggle";
  bar.append(state, toggle);
  main.before(bar);

  function show() {
    bar.classList.toggle("paused", pausedHere);
    toggle.textContent = pausedHere ? "Resume live updates" : "Pause live updates";
    main.dataset.live = stopped ? "stopped" : pausedHere ? "paused" : "on";
    if (stopped) {
      state.textContent = stopped;
    } else if (pausedHere) {
      state.textContent = "Live updates paused" + (updated ? ` (page as of ${updated})` : "");
    } else {
      const how = `Live: every ${every / 1000} s`;
      state.textContent = how + (waiting ? ` (${waiting})` : updated ? `, updated ${updated}` : "");
    }
  }

  toggle.addEventListener("click", function () {
    setPaused(!pausedHere);
    show();
    if (!pausedHere) {
      tick();
    }
  });

  function dirty(form) {
    return Array.from(form.elements).some(function (field) {
      if (field instanceof HTMLSelectElement) {
        const options = Array.from(field.options);
        if (field.multiple) {
          return options.some((o) => o.selected !== o.defaultSelected);
        }
        // one choice: the last option marked selected in the markup, else the first
        const marked = options.filter((o) => o.defaultSelected);
        const initial = marked.length ? marked[marked.length - 1].index : 0;
        return options.length > 0 && field.selectedIndex !== initial;
      }
      if (field instanceof HTMLTextAreaElement) {
        return field.value !== field.defaultValue;
      }
      if (field instanceof HTMLInputElement) {
        if (field.type === "checkbox" || field.type === "radio") {
          return field.checked !== field.defaultChecked;
        }
        return field.type !== "hidden" && field.value !== field.defaultValue;
      }
      return false;
    });
  }

  function busy() {
    const active = document.activeElement;
    if (active !== null && active !== main && main.contains(active)) {
      return "held while the page has the focus";
    }
    if (Array.from(main.querySelectorAll("form")).some(dirty)) {
      return "held: a form has input not yet sent";
    }
    return "";
  }

  // A fold (<details>) the user opened or closed stays so: matched by id, else by its place
  // when the page has as many folds as before.
  function keepFolds(fresh) {
    const was = Array.from(main.querySelectorAll("details"));
    const will = Array.from(fresh.querySelectorAll("details"));
    will.forEach(function (fold, i) {
      const match = fold.id
        ? was.find((w) => w.id === fold.id)
        : was.length === will.length && !was[i].id
          ? was[i]
          : undefined;
      if (match !== undefined) {
        fold.open = match.open;
      }
    });
  }

  // Put the new <main>'s children in place: only those that changed when both have the same
  // parts (same elements, same ids, in the same order); all of them otherwise.
  function swap(fresh) {
    keepFolds(fresh);
    const old = Array.from(main.children);
    const now = Array.from(fresh.children);
    const same =
      old.length === now.length &&
      old.every((o, i) => o.tagName === now[i].tagName && o.id === now[i].id);
    if (!same) {
      main.replaceChildren(...Array.from(fresh.childNodes, (n) => document.importNode(n, true)));
      return;
    }
    old.forEach(function (o, i) {
      if (!o.isEqualNode(now[i])) {
        o.replaceWith(document.importNode(now[i], true));
      }
    });
  }

  async function refresh() {
    const answer = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    });
    if (answer.redirected || answer.status === 401 || answer.status === 403) {
      stopped = "Live updates stopped: signed out (reload to sign in)";
      return;
    }
    if (!answer.ok) {
      waiting = `last read refused: ${answer.status}`;
      return; // the page as it was; the next tick tries again
    }
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.querySelector("main");
    if (fresh === null || pausedHere || busy()) {
      return; // paused, or the user started on the page, while it was read
    }
    swap(fresh);
    waiting = "";
    updated = new Date().toISOString().slice(11, 19) + "Z";
    main.dataset.refreshed = String(Date.now());
  }

  function tick() {
    ticks += 1;
    main.dataset.ticks = String(ticks); // for whoever checks that a paused page stays still
    if (stopped || pausedHere || reading || document.hidden) {
      return;
    }
    waiting = busy();
    if (waiting) {
      show();
      return;
    }
    reading = true;
    refresh()
      .catch(function () {
        waiting = "the last read failed";
      })
      .finally(function () {
        reading = false;
        show();
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      tick(); // back to the tab: fresh at once
    }
  });
  window.addEventListener("pageshow", function () {
    pausedHere = paused(); // back/forward: the choice may have changed on another page
    show();
  });
  show();
  window.setInterval(tick, every);
})();
