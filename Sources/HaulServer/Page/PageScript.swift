/// The page's script (`GET /haul.js`): takes the token from `#token=…` into localStorage
/// (kept apart per origin, port included; kept for new tabs and deep links) and out of the address bar, follows the event stream
/// with `fetch` (EventSource cannot send the bearer token), and calls the API for every button.
enum PageScript {
    static let text = #"""
        'use strict';
        const API = '/api/v1';
        const page = { token: null, offered: null, verified: false, items: new Map(), last: null, network: null };
        const $ = (id) => document.getElementById(id);

        function takeFragment() {
          const hash = location.hash.slice(1);
          let add = null;
          for (const part of hash.split('&')) {
            const token = /^token=([0-9a-f]{64})$/.exec(part);
            if (token) page.offered = token[1];
            if (part.startsWith('add?')) add = new URLSearchParams(part.slice(4));
          }
          // The token leaves the address bar (and the history) at once.
          if (hash) history.replaceState(null, '', location.pathname);
          page.token = localStorage.getItem('haul-token');
          if (add) {
            $('urls').value = add.getAll('url').join('\n');
            $('urls').focus();
          }
        }

        function problem(text) {
          $('problem').hidden = !text;
          $('problem').textContent = text || '';
        }

        const hex = (bytes) => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');

        // Whether what answers here knows `token` (an HMAC of a fresh nonce), asked without
        // sending it: after haul serve stops, another user's process may hold its port.
        async function proven(token) {
          if (!(window.crypto && crypto.subtle)) return true;  // not a secure context: nothing to check with
          const nonce = hex(crypto.getRandomValues(new Uint8Array(16)));
          const answer = await fetch(API + '/proof?nonce=' + nonce, { cache: 'no-store', credentials: 'omit' });
          if (!answer.ok) return false;
          const { proof } = await answer.json();
          const key = await crypto.subtle.importKey('raw', new TextEncoder().encode(token),
            { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
          const mac = await crypto.subtle.sign('HMAC', key, new TextEncoder().encode('haul-serve-proof:' + nonce));
          return hex(new Uint8Array(mac)) === proof;
        }

        // A token from the address replaces the stored one only once this daemon proves it is
        // its own: a link with any other token cannot log the page out.
        async function chooseToken() {
          if (page.offered && page.offered !== page.token && await proven(page.offered).catch(() => false)) {
            localStorage.setItem('haul-token', page.offered);
            page.token = page.offered;
          }
          if (!page.token && page.offered) page.token = page.offered;
        }

        async function call(method, path, body) {
          if (!page.verified) throw new Error('not connected to haul serve');
          const headers = { 'Authorization': 'Bearer ' + page.token };
          if (body !== undefined) headers['Content-Type'] = 'application/json';
          const answer = await fetch(API + path, {
            method, headers, body: body === undefined ? undefined : JSON.stringify(body),
            cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer',
          });
          const json = await answer.json().catch(() => ({}));
          if (!answer.ok) throw new Error(json.error || ('HTTP ' + answer.status));
          return json;
        }

        function bytes(n) {
          const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
          let v = n, u = 0;
          while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
          return u === 0 ? n + ' B' : v.toFixed(1) + ' ' + units[u];
        }

        function duration(s) {
          if (!isFinite(s) || s < 0) return '--:--';
          s = Math.round(s);
          const two = (n) => String(n).padStart(2, '0');
          return s >= 3600 ? Math.floor(s / 3600) + ':' + two(Math.floor(s / 60) % 60) + ':' + two(s % 60)
            : Math.floor(s / 60) + ':' + two(s % 60);
        }

        const ended = (state) => ['completed', 'failed', 'cancelled'].includes(state);

        function notifyEnd(before, after) {
          if (!before || ended(before.state) || !ended(after.state) || after.state === 'cancelled') return;
          if (!('Notification' in window) || Notification.permission !== 'granted') return;
          const name = after.file || after.name || after.url;
          new Notification(after.state === 'completed' ? 'Downloaded ' + name : 'Failed: ' + name,
            { body: after.error || '' });
        }

        function showNetwork(state) {
          page.network = state;
          const banner = $('network');
          if (!state || state.status === 'unknown') { banner.hidden = true; return; }
          banner.hidden = false;
          const kinds = { wifi: 'Wi-Fi', wired: 'Wired', cellular: 'Cellular', other: 'Network' };
          if (state.status === 'satisfied') {
            banner.className = 'banner ok';
            banner.textContent = (kinds[state.kind] || 'Network') + (state.interface ? ' (' + state.interface + ')' : '')
              + (state.expensive ? ', expensive' : '');
          } else {
            banner.className = 'banner';
            banner.textContent = 'Offline: downloads wait for the network' + (state.reason ? ' (' + state.reason + ')' : '');
          }
        }

        function row(item) {
          const li = $('row').content.firstElementChild.cloneNode(true);
          li.dataset.id = item.id;
          li.querySelector('.actions').addEventListener('click', (event) => {
            const act = event.target.dataset && event.target.dataset.act;
            if (act) control(item.id, act);
          });
          return li;
        }

        function fill(li, item) {
          const name = item.file || item.name || item.url;
          li.querySelector('.name').textContent = name;
          li.querySelector('.name').title = item.url;
          const badge = li.querySelector('.badge');
          badge.textContent = item.state;
          badge.className = 'badge ' + item.state;
          const bar = li.querySelector('progress');
          const total = item.total || 0;
          if (total > 0) { bar.max = total; bar.value = Math.min(item.done, total); } else { bar.removeAttribute('value'); }
          if (item.state === 'completed') { bar.max = 1; bar.value = 1; }
          bar.setAttribute('aria-label', name + ' progress');
          const percent = total > 0 ? Math.floor(item.done / total * 100) + '% ' : '';
          li.querySelector('.bytes').textContent = percent + bytes(item.done) + (total > 0 ? ' / ' + bytes(total) : '');
          const running = item.state === 'running';
          li.querySelector('.speed').textContent = running && item.speed ? bytes(Math.round(item.speed)) + '/s' : '';
          li.querySelector('.eta').textContent = running && item.eta != null ? 'ETA ' + duration(item.eta) : '';
          li.querySelector('.conns').textContent = item.connections > 1 ? item.connections + ' connections' : '';
          const error = li.querySelector('.error');
          error.hidden = !(item.state === 'failed' && item.error);
          error.textContent = item.error || '';
          const queued = item.state === 'queued';
          const can = {
            top: queued, up: queued, down: queued,
            pause: ['queued', 'running', 'waiting'].includes(item.state),
            resume: item.state === 'paused' || item.state === 'failed',
            cancel: !ended(item.state),
            remove: true,
            'remove-files': item.state === 'completed' && !!item.file,
          };
          for (const button of li.querySelectorAll('button')) {
            button.hidden = !can[button.dataset.act];
            button.setAttribute('aria-label', button.textContent + ' ' + name);
          }
        }

        function render() {
          const list = $('list');
          const search = $('search').value.trim().toLowerCase();
          const wanted = $('state').value;
          const shown = [...page.items.values()]
            .filter((d) => !wanted || d.state === wanted)
            .filter((d) => !search || (d.file || d.name || d.url).toLowerCase().includes(search) || d.url.toLowerCase().includes(search))
            .sort((a, b) => b.priority - a.priority || a.position - b.position);
          const old = new Map([...list.children].map((li) => [Number(li.dataset.id), li]));
          const rows = shown.map((item) => {
            const li = old.get(item.id) || row(item);
            fill(li, item);
            return li;
          });
          // Reordered in place: a focused button keeps its focus.
          rows.forEach((li, i) => { if (list.children[i] !== li) list.insertBefore(li, list.children[i] || null); });
          while (list.children.length > rows.length) list.lastElementChild.remove();
          $('empty').hidden = page.items.size > 0;
          const running = [...page.items.values()].filter((d) => d.state === 'running');
          const speed = running.reduce((sum, d) => sum + (d.speed || 0), 0);
          $('activity').className = running.length ? 'activity busy' : 'activity';
          $('activity').textContent = running.length ? running.length + ' running, ' + bytes(Math.round(speed)) + '/s' : 'idle';
        }

        async function control(id, act) {
          try {
            if (act === 'remove-files') {
              if (!confirm('Remove this download and delete its file?')) return;
              await call('POST', '/downloads/' + id + '/remove', { files: true });
            } else if (['top', 'up', 'down'].includes(act)) {
              await call('POST', '/downloads/' + id + '/move', { to: act });
            } else {
              await call('POST', '/downloads/' + id + '/' + act, {});
            }
            problem(null);
          } catch (error) { problem(error.message); }
        }

        function showSettings(s) {
          $('concurrency').value = s.maxConcurrentDownloads;
          $('speed-limit').value = Math.round(s.maxOverallBytesPerSecond / 1024);
        }

        function apply(event, body) {
          switch (event) {
            case 'snapshot':
              page.items = new Map(body.downloads.map((d) => [d.id, d]));
              call('GET', '/network').then(showNetwork).catch(() => {});
              call('GET', '/settings').then(showSettings).catch(() => {});
              break;
            case 'added': case 'state': {
              const before = page.items.get(body.id);
              page.items.set(body.id, body);
              if (event === 'state') notifyEnd(before, body);
              break;
            }
            case 'removed': page.items.delete(body.id); break;
            case 'moved': {
              const item = page.items.get(body.id);
              if (item) item.priority = body.priority;
              for (const [id, position] of body.positions) {
                const other = page.items.get(id);
                if (other) other.position = position;
              }
              break;
            }
            case 'progress': {
              const item = page.items.get(body.id);
              if (item) Object.assign(item, { done: body.done, total: body.total, speed: body.speed, eta: body.eta });
              break;
            }
            case 'network': showNetwork(body); return;
            case 'settings': showSettings(body); return;
            default: return;
          }
          render();
        }

        function dispatch(block) {
          let id = null, event = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            let value = colon < 0 ? '' : line.slice(colon + 1);
            if (value.startsWith(' ')) value = value.slice(1);
            if (field === 'id') id = value;
            else if (field === 'event') event = value;
            else if (field === 'data') data += (data ? '\n' : '') + value;
          }
          if (id !== null && /^\d+$/.test(id)) page.last = id;
          if (data) apply(event, JSON.parse(data));
        }

        async function follow() {
          for (;;) {
            try {
              await chooseToken();
              page.verified = await proven(page.token);
              if (!page.verified) {
                throw new Error('what answers here cannot prove it is this haul serve: the token was not sent');
              }
              if (page.offered === page.token) localStorage.setItem('haul-token', page.token);
              const headers = { 'Authorization': 'Bearer ' + page.token, 'Accept': 'text/event-stream' };
              if (page.last !== null) headers['Last-Event-ID'] = page.last;
              const answer = await fetch(API + '/events', { headers, cache: 'no-store', credentials: 'omit' });
              if (answer.status === 401) {
                problem('The token is wrong or old: open the address haul serve printed (with #token=…).');
                return;
              }
              if (!answer.ok) throw new Error('HTTP ' + answer.status);
              problem(null);
              const reader = answer.body.getReader();
              const decoder = new TextDecoder();
              let buffer = '';
              for (;;) {
                const { value, done } = await reader.read();
                if (done) break;
                buffer += decoder.decode(value, { stream: true });
                let end;
                while ((end = buffer.indexOf('\n\n')) >= 0) {
                  dispatch(buffer.slice(0, end));
                  buffer = buffer.slice(end + 2);
                }
              }
            } catch (error) {
              page.verified = false;
              problem('Lost haul serve (' + error.message + '); trying again.');
            }
            await new Promise((resolve) => setTimeout(resolve, 2000));
          }
        }

        async function add(event) {
          event.preventDefault();
          const urls = $('urls').value.split('\n').map((s) => s.trim()).filter(Boolean);
          const body = { urls };
          const text = (id) => $(id).value.trim();
          if (text('name')) body.name = text('name');
          if (text('subfolder')) body.subfolder = text('subfolder');
          if (text('connections')) body.connections = Number(text('connections'));
          if (text('rate')) body.maxBytesPerSecond = Math.round(Number(text('rate')) * 1024);
          if (text('checksum')) body.checksums = text('checksum').split(',').map((s) => s.trim());
          if (text('priority') && Number(text('priority')) !== 0) body.priority = Number(text('priority'));
          try {
            await call('POST', '/downloads', body);
            $('urls').value = '';
            $('name').value = '';
            problem(null);
          } catch (error) { problem(error.message); }
        }

        function start() {
          takeFragment();
          $('add-form').addEventListener('submit', add);
          $('search').addEventListener('input', render);
          $('state').addEventListener('change', render);
          if ('Notification' in window && Notification.permission === 'default') {
            $('notify').hidden = false;
            $('notify').addEventListener('click', () => Notification.requestPermission().then(() => { $('notify').hidden = true; }));
          }
          if (!page.token && !page.offered) {
            problem('No token: open the address haul serve printed (it ends with #token=…).');
            return;
          }
          $('concurrency').addEventListener('change', () => {
            const n = Number($('concurrency').value);
            call('POST', '/settings', { maxConcurrentDownloads: n }).then(() => problem(null))
              .catch((error) => problem(error.message));
          });
          $('speed-limit').addEventListener('change', () => {
            const kib = Number($('speed-limit').value);
            call('POST', '/settings', { maxOverallBytesPerSecond: Math.round(kib * 1024) }).then(() => problem(null))
              .catch((error) => problem(error.message));
          });
          follow();
        }

        start();

        """#
}
