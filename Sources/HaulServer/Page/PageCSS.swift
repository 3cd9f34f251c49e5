/// The page's style (`GET /haul.css`): light and dark after `prefers-color-scheme`, one column
/// on a phone-width window.
enum PageCSS {
    static let text = #"""
        :root { --bg: #fafafa; --fg: #1d1d1f; --muted: #6e6e73; --card: #fff; --line: #d2d2d7;
          --accent: #0a64d6; --ok: #1a7f37; --bad: #c62828; --warn: #9a6700; color-scheme: light dark; }
        @media (prefers-color-scheme: dark) {
          :root { --bg: #161618; --fg: #f2f2f7; --muted: #a1a1a6; --card: #232326; --line: #3a3a3e;
            --accent: #4c9bff; --ok: #4ac26b; --bad: #ff6b6b; --warn: #e3b341; }
        }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; background: var(--bg); color: var(--fg); }
        header { display: flex; align-items: center; gap: 1rem; flex-wrap: wrap; padding: .75rem 1rem; border-bottom: 1px solid var(--line); }
        h1 { font-size: 1.25rem; margin: 0; display: flex; align-items: center; gap: .4rem; }
        h2 { font-size: 1rem; margin: 0 0 .5rem; }
        main { max-width: 60rem; margin: 0 auto; padding: 1rem; display: grid; gap: 1.25rem; }
        section { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 1rem; }
        label { display: block; color: var(--muted); font-size: .85rem; margin: .25rem 0; }
        input, textarea, select, button { font: inherit; color: inherit; }
        input, textarea, select { width: 100%; padding: .4rem .5rem; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); }
        button { padding: .35rem .8rem; border: 1px solid var(--line); border-radius: 6px; background: var(--bg); cursor: pointer; }
        button[type=submit] { margin-top: .6rem; background: var(--accent); color: #fff; border-color: var(--accent); }
        button:focus-visible, input:focus-visible, textarea:focus-visible, select:focus-visible, summary:focus-visible {
          outline: 3px solid var(--accent); outline-offset: 1px; }
        .options { display: grid; grid-template-columns: repeat(auto-fill, minmax(14rem, 1fr)); gap: 0 1rem; }
        .filters { display: grid; grid-template-columns: 2fr 1fr; gap: 1rem; margin-bottom: .5rem; }
        .activity { color: var(--muted); font-size: .9rem; }
        label.inline { display: flex; align-items: center; gap: .4rem; margin: 0; }
        label.inline input { width: 4.5rem; }
        .activity.busy::before { content: ""; display: inline-block; width: .7rem; height: .7rem; margin-right: .4rem;
          border: 2px solid var(--accent); border-right-color: transparent; border-radius: 50%; animation: spin 1s linear infinite; }
        @keyframes spin { to { transform: rotate(360deg); } }
        @media (prefers-reduced-motion: reduce) { .activity.busy::before { animation: none; } }
        .banner { padding: .5rem 1rem; background: var(--warn); color: #000; }
        .banner.ok { background: transparent; color: var(--muted); border-bottom: 1px solid var(--line); }
        .banner.problem { background: var(--bad); color: #fff; }
        .list { list-style: none; margin: 0; padding: 0; }
        .item { padding: .75rem 0; border-top: 1px solid var(--line); }
        .item:first-child { border-top: 0; }
        .top { display: flex; justify-content: space-between; gap: .5rem; }
        .name { font-weight: 600; overflow-wrap: anywhere; }
        .badge { font-size: .8rem; padding: 0 .5rem; border-radius: 999px; border: 1px solid var(--line); white-space: nowrap; }
        .badge.completed { color: var(--ok); border-color: var(--ok); }
        .badge.failed, .badge.cancelled { color: var(--bad); border-color: var(--bad); }
        .badge.running { color: var(--accent); border-color: var(--accent); }
        progress { width: 100%; height: .6rem; margin: .35rem 0; accent-color: var(--accent); }
        .facts { display: flex; flex-wrap: wrap; gap: .25rem 1rem; color: var(--muted); font-size: .85rem; font-variant-numeric: tabular-nums; }
        .error { color: var(--bad); font-size: .85rem; margin-top: .25rem; }
        .actions { display: flex; flex-wrap: wrap; gap: .4rem; margin-top: .4rem; }
        .empty { color: var(--muted); }
        @media (max-width: 40rem) {
          main { padding: .5rem; }
          .filters { grid-template-columns: 1fr; gap: 0; }
          .actions button { flex: 1 1 40%; }
        }

        """#
}
