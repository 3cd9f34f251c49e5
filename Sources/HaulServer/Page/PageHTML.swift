/// The page's HTML (`GET /`): no inline script or style, so that the Content-Security-Policy
/// can be `default-src 'self'` (the token the page keeps is only as safe as the script that
/// can read it).
enum PageHTML {
    static let text = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="color-scheme" content="light dark">
        <title>Haul</title>
        <link rel="stylesheet" href="/haul.css">
        <link rel="icon" href="/icon.svg" type="image/svg+xml">
        <script src="/haul.js" defer></script>
        </head>
        <body>
        <header>
          <h1><img src="/icon.svg" alt="" width="24" height="24"> Haul</h1>
          <span id="activity" class="activity" role="status" aria-live="polite">idle</span>
          <label class="inline">Downloads at once
            <input id="concurrency" type="number" min="1" max="64" inputmode="numeric">
          </label>
          <label class="inline">Speed limit, KiB/s (0: none)
            <input id="speed-limit" type="number" min="0" step="1" inputmode="numeric">
          </label>
          <button id="notify" type="button" hidden>Notify me when downloads end</button>
        </header>
        <div id="network" class="banner" role="status" aria-live="polite" hidden></div>
        <div id="problem" class="banner problem" role="alert" hidden></div>
        <main>
          <section id="adder" aria-labelledby="add-title">
            <h2 id="add-title">Add downloads</h2>
            <form id="add-form">
              <label for="urls">URLs, one per line</label>
              <textarea id="urls" name="urls" rows="2" required placeholder="https://example.com/file.iso"></textarea>
              <details>
                <summary>Options</summary>
                <div class="options">
                  <label>File name (one URL) <input id="name" name="name" autocomplete="off"></label>
                  <label>Folder under the download root <input id="subfolder" name="subfolder" autocomplete="off"></label>
                  <label>Connections <input id="connections" name="connections" type="number" min="1" max="16"></label>
                  <label>Speed limit, KiB/s <input id="rate" name="rate" type="number" min="1"></label>
                  <label>Checksum (sha-256=HEX) <input id="checksum" name="checksum" autocomplete="off"></label>
                  <label>Priority <input id="priority" name="priority" type="number" min="-1000" max="1000" value="0"></label>
                </div>
              </details>
              <button type="submit">Add</button>
            </form>
          </section>
          <section aria-labelledby="list-title">
            <h2 id="list-title">Downloads</h2>
            <div class="filters">
              <label>Search <input id="search" type="search" placeholder="name or URL"></label>
              <label>State
                <select id="state">
                  <option value="">all</option>
                  <option>running</option><option>queued</option><option>paused</option>
                  <option>waiting</option><option>completed</option><option>failed</option>
                  <option>cancelled</option>
                </select>
              </label>
            </div>
            <p id="empty" class="empty">No downloads yet.</p>
            <ul id="list" class="list"></ul>
          </section>
        </main>
        <template id="row">
          <li class="item">
            <div class="top"><span class="name"></span><span class="badge"></span></div>
            <progress max="1" value="0"></progress>
            <div class="facts"><span class="bytes"></span><span class="speed"></span><span class="eta"></span><span class="conns"></span></div>
            <div class="error" hidden></div>
            <div class="actions">
              <button type="button" data-act="top" title="Start it next">Top</button>
              <button type="button" data-act="up">Up</button>
              <button type="button" data-act="down">Down</button>
              <button type="button" data-act="pause">Pause</button>
              <button type="button" data-act="resume">Resume</button>
              <button type="button" data-act="cancel">Cancel</button>
              <button type="button" data-act="remove">Remove</button>
              <button type="button" data-act="remove-files">Remove with file</button>
            </div>
          </li>
        </template>
        </body>
        </html>

        """#
}
