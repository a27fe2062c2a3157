// The chitin web chat. Served from the binary (host/src/gateway/webchat.rs
// documents the protocol). No dependencies, no build step.
//
// Safety rule: text from the user or the model reaches the DOM only through
// textContent or through renderMarkdown, which escapes every character of
// the input before adding the few tags it makes itself.
'use strict';
(() => {
  const TOKEN_KEY = 'chitin.token';
  const SESSION_KEY = 'chitin.session';
  const RECONNECT_MS = 1000;
  const $ = (id) => document.getElementById(id);

  const state = {
    token: localStorage.getItem(TOKEN_KEY) || '',
    session: localStorage.getItem(SESSION_KEY) || '',
    generation: 0, // bumped on every session switch: old stream loops end
    abort: null, // the AbortController of the open event stream
    pending: null, // {div, text} of the reply being streamed
    busy: false,
  };
  // Counters the browser test reads; harmless for users.
  const stats = { connects: 0, historyLoads: 0, deltas: 0, drops: 0 };

  // ---------- Markdown, safely ----------

  function escapeHtml(s) {
    return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }

  // Bold, italic and line breaks on plain text (escaped here).
  function emphasis(raw) {
    let s = escapeHtml(raw);
    s = s.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^*])\*([^*\n]+)\*(?!\*)/g, '$1<em>$2</em>');
    return s.replace(/\n/g, '<br>');
  }

  // Inline code and links are cut out first, so emphasis never reaches
  // into them; a link must be http(s) or it stays text.
  function inline(text) {
    const token = /(`[^`\n]+`)|\[([^\]\n]+)\]\(([^()\s]+)\)/g;
    let out = '';
    let last = 0;
    let m;
    while ((m = token.exec(text))) {
      out += emphasis(text.slice(last, m.index));
      if (m[1]) {
        out += '<code>' + escapeHtml(m[1].slice(1, -1)) + '</code>';
      } else if (/^https?:\/\//i.test(m[3])) {
        out += '<a href="' + escapeHtml(m[3]) + '" rel="noopener noreferrer" target="_blank">' + emphasis(m[2]) + '</a>';
      } else {
        out += emphasis(m[0]);
      }
      last = token.lastIndex;
    }
    return out + emphasis(text.slice(last));
  }

  function paragraphs(text) {
    return text.split(/\n{2,}/).filter((p) => p.trim() !== '').map((p) => '<p>' + inline(p.replace(/^\n+|\n+$/g, '')) + '</p>').join('');
  }

  // Fenced code blocks (an unclosed fence, mid-stream, runs to the end),
  // then paragraphs of inline Markdown.
  function renderMarkdown(text) {
    const fence = /```([^\n`]*)\n([\s\S]*?)(?:```|$)/g;
    let out = '';
    let last = 0;
    let m;
    while ((m = fence.exec(text))) {
      out += paragraphs(text.slice(last, m.index));
      const lang = /^[\w+-]+$/.test(m[1].trim()) ? ' class="language-' + m[1].trim() + '"' : '';
      out += '<pre><code' + lang + '>' + escapeHtml(m[2].replace(/\n$/, '')) + '</code></pre>';
      last = fence.lastIndex;
      if (m[0].length === 0) break;
    }
    return out + paragraphs(text.slice(last));
  }

  // ---------- the page ----------

  function scrollDown() {
    const box = $('messages');
    box.scrollTop = box.scrollHeight;
  }

  function addMessage(role, text) {
    const div = document.createElement('div');
    div.className = 'msg ' + role;
    div.dataset.text = text;
    if (role === 'assistant') div.innerHTML = renderMarkdown(text);
    else div.textContent = text;
    $('messages').append(div);
    scrollDown();
    return div;
  }

  function addNotice(text) {
    return addMessage('notice', text);
  }

  function clearHints() {
    for (const hint of document.querySelectorAll('#messages .hint')) hint.remove();
  }

  function setBusy(busy) {
    state.busy = busy;
    $('stop').disabled = !busy;
  }

  function setStatus(text, connected) {
    $('status').textContent = text;
    $('status').classList.toggle('connected', !!connected);
  }

  function lastAssistantText() {
    const all = document.querySelectorAll('#messages .msg.assistant');
    return all.length ? all[all.length - 1].dataset.text : null;
  }

  function onEvent(event) {
    switch (event.kind) {
      case 'ready':
        stats.connects++;
        setStatus('connected', true);
        return loadHistory();
      case 'delta': {
        stats.deltas++;
        if (!state.pending) {
          const div = addMessage('assistant', '');
          div.classList.add('streaming');
          state.pending = { div, text: '' };
        }
        state.pending.text += event.text;
        state.pending.div.dataset.text = state.pending.text;
        state.pending.div.innerHTML = renderMarkdown(state.pending.text);
        scrollDown();
        return;
      }
      case 'progress': {
        // A tool's events share one hint per call, updated in place: its
        // start (`name(args)`), then the plugin's latest progress text,
        // then done or failed. The turn's own hint ("running") has no call.
        let hint = event.call_id ? Array.from(document.querySelectorAll('#messages .hint')).find((h) => h.dataset.call === event.call_id) : null;
        if (!hint) {
          hint = document.createElement('div');
          hint.className = 'hint';
          if (event.call_id) hint.dataset.call = event.call_id;
          $('messages').append(hint);
        }
        if (event.phase === 'started') hint.textContent = '↳ ' + event.text;
        else if (event.phase === 'progress') hint.textContent = '↳ ' + event.tool + ': ' + event.text;
        else if (event.phase === 'finished') hint.classList.add(event.ok ? 'done' : 'failed');
        else hint.textContent = event.text;
        scrollDown();
        return;
      }
      case 'message': {
        let div;
        if (state.pending) {
          div = state.pending.div;
          div.dataset.text = event.text;
          div.innerHTML = renderMarkdown(event.text);
          div.classList.remove('streaming');
          state.pending = null;
        } else if (event.streamed && lastAssistantText() === event.text) {
          // Already shown by the history loaded after a reconnect.
          return;
        } else {
          div = addMessage('assistant', event.text);
        }
        if (event.failed) div.classList.add('failed');
        scrollDown();
        return;
      }
      case 'stream_end':
        return;
      case 'turn_end':
        if (state.pending) {
          state.pending.div.classList.remove('streaming');
          state.pending = null;
        }
        clearHints();
        setBusy(false);
        refreshSessions();
        return;
      default:
        return;
    }
  }

  // ---------- server calls ----------

  function headers() {
    return { Authorization: 'Bearer ' + state.token, 'Content-Type': 'application/json' };
  }

  async function api(method, path, body) {
    const res = await fetch(path, { method, headers: headers(), body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
    if (res.status === 401) {
      needToken(refusal());
      throw new Error('unauthorized');
    }
    if (!res.ok) {
      let message = 'HTTP ' + res.status;
      try {
        message = (await res.json()).error.message;
      } catch (_) { /* not JSON */ }
      throw new Error(message);
    }
    return res.json();
  }

  async function loadHistory() {
    const session = state.session;
    const history = await api('GET', '/chat/history?session=' + encodeURIComponent(session));
    if (session !== state.session) return;
    stats.historyLoads++;
    $('messages').replaceChildren();
    state.pending = null;
    for (const m of history.messages) addMessage(m.role, m.text);
    setBusy(history.running);
  }

  async function refreshSessions() {
    let list;
    try {
      list = (await api('GET', '/chat/sessions')).sessions;
    } catch (_) {
      return;
    }
    const ul = $('sessions');
    ul.replaceChildren();
    if (!list.some((s) => s.id === state.session)) list.unshift({ id: state.session, title: '' });
    for (const s of list) {
      const li = document.createElement('li');
      li.textContent = s.title || 'New chat';
      li.title = s.title || 'New chat';
      li.dataset.id = s.id;
      if (s.id === state.session) li.classList.add('active');
      li.addEventListener('click', () => switchSession(s.id));
      ul.append(li);
    }
  }

  // Reads the session's event stream until it ends, then reconnects after
  // RECONNECT_MS (the `ready` event reloads the history) until the session
  // changes. fetch, not EventSource, so the token travels in a header.
  async function streamLoop(generation) {
    while (generation === state.generation) {
      const controller = new AbortController();
      state.abort = controller;
      try {
        const res = await fetch('/chat/events?session=' + encodeURIComponent(state.session), {
          headers: headers(), signal: controller.signal, cache: 'no-store',
        });
        if (res.status === 401) {
          needToken(refusal());
          return;
        }
        if (!res.ok) throw new Error('HTTP ' + res.status);
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            for (const line of frame.split('\n')) {
              if (!line.startsWith('data: ')) continue;
              if (generation !== state.generation) return;
              await onEvent(JSON.parse(line.slice(6)));
            }
          }
        }
      } catch (_) {
        // Aborted, network gone, or the gateway restarting: retry below.
      }
      if (generation !== state.generation) return;
      stats.drops++;
      setStatus('reconnecting…', false);
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
    }
  }

  function newId() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function switchSession(id) {
    state.generation++;
    if (state.abort) state.abort.abort();
    state.session = id;
    localStorage.setItem(SESSION_KEY, id);
    state.pending = null;
    setBusy(false);
    $('messages').replaceChildren();
    setStatus('connecting…', false);
    refreshSessions();
    streamLoop(state.generation);
  }

  async function send(text) {
    if (text.trim() === '/stop') return stop();
    addMessage('user', text);
    setBusy(true);
    try {
      await api('POST', '/chat/send', { session: state.session, text });
    } catch (e) {
      addNotice('Not sent: ' + e.message);
      setBusy(false);
    }
  }

  async function stop() {
    try {
      const { stopped } = await api('POST', '/chat/stop', { session: state.session });
      addNotice(stopped ? 'Stopped.' : 'Nothing is running.');
    } catch (e) {
      addNotice('Stop failed: ' + e.message);
    }
  }

  // ---------- the token ----------

  // No message when no token was tried yet (the first visit).
  function refusal() {
    return state.token ? 'The gateway refused this token.' : '';
  }

  function needToken(message) {
    if (message) localStorage.removeItem(TOKEN_KEY);
    state.generation++;
    if (state.abort) state.abort.abort();
    setStatus('offline', false);
    $('login-error').textContent = message || '';
    $('login-error').hidden = !message;
    $('login').hidden = false;
    $('token').focus();
  }

  async function start() {
    try {
      await api('GET', '/chat/sessions');
    } catch (_) {
      return; // needToken was called for a 401
    }
    localStorage.setItem(TOKEN_KEY, state.token);
    $('login').hidden = true;
    switchSession(state.session || newId());
  }

  $('login-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = $('token').value.trim();
    start();
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('input').value;
    if (text.trim() === '') return;
    $('input').value = '';
    send(text);
  });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', stop);
  $('new-session').addEventListener('click', () => switchSession(newId()));

  window.chitin = {
    stats,
    session: () => state.session,
    // For the browser test: drop the event stream as a network would.
    dropStream: () => state.abort && state.abort.abort(),
    renderMarkdown,
  };

  // Try the stored token (or none: a gateway with auth_token = "" on
  // loopback needs none); a 401 shows the token form.
  start();
})();
