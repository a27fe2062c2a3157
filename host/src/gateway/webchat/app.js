// The chitin web chat. Served from the binary (host/src/gateway/webchat.rs
// documents the protocol). No dependencies, no build step.
//
// Safety rule: text from the user or the model reaches the DOM only through
// textContent or through renderMarkdown, which escapes every character of
// the input and adds only the tags it makes itself (in linear time: see
// "Markdown, safely and in linear time" below).
'use strict';
(() => {
  const TOKEN_KEY = 'chitin.token';
  const SESSION_KEY = 'chitin.session';
  const RECONNECT_MS = 1000;
  // While a reply streams, the next render waits this many times as long
  // as the last one took (and at least a frame): a long reply never spends
  // more than a fifth of the page's time re-rendering.
  const RENDER_BACKOFF = 4;
  const $ = (id) => document.getElementById(id);

  const state = {
    token: localStorage.getItem(TOKEN_KEY) || '',
    session: localStorage.getItem(SESSION_KEY) || '',
    generation: 0, // bumped on every session switch: old stream loops end
    abort: null, // the AbortController of the open event stream
    pending: null, // {div, text, scheduled, nextAt} of the reply being streamed
    busy: false,
  };
  // Counters the browser test reads; harmless for users.
  const stats = { connects: 0, historyLoads: 0, deltas: 0, drops: 0, renders: 0 };

  // ---------- Markdown, safely and in linear time ----------
  //
  // A reply is hostile input (the model can be made to write anything) and
  // it is rendered again while it streams, so the renderer is a small
  // hand-written parser rather than regular expressions: blocks line by
  // line, then inline text in one left-to-right scan with CommonMark's
  // delimiter and bracket stacks. Every step is a bounded number of passes
  // over its text; nothing backtracks (the old link pattern did: its time
  // grew with the square of a reply of `[` characters). Nesting that would
  // multiply the work (quotes and lists, parentheses in a link, table
  // columns) has a fixed limit past which the text stays text.
  //
  // Safety: every character of the input reaches the output through
  // escapeHtml; the only tags are the ones made here; a link or an
  // autolink is made for http, https and mailto only.
  //
  // Supported: paragraphs (a newline is a line break, as in chat apps),
  // ATX headings, block quotes, bullet and ordered lists (nested), GFM
  // tables, fenced code blocks (with a copy button), thematic breaks;
  // inline code, emphasis, strong, ~~strikethrough~~, links, bare and
  // <angle> http(s) autolinks, backslash escapes.

  const MAX_NESTING = 8; // block quotes and lists nested deeper stay text
  const MAX_LINK_PARENS = 8; // ( ) nesting inside a link destination
  const MAX_TABLE_COLUMNS = 64; // wider "tables" stay text
  const DELIMS = '*_~';
  const ASCII_PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
  const HTML_ESCAPES = new Map([['&', '&amp;'], ['<', '&lt;'], ['>', '&gt;'], ['"', '&quot;'], ["'", '&#39;']]);

  // One pass, copying the runs between special characters (a reply of
  // 100 000 `>` is 100 000 replacements).
  function escapeHtml(s) {
    if (!/[&<>"']/.test(s)) return s;
    let out = '';
    let last = 0;
    for (let k = 0; k < s.length; k++) {
      const entity = HTML_ESCAPES.get(s[k]);
      if (entity === undefined) continue;
      if (k > last) out += s.slice(last, k);
      out += entity;
      last = k + 1;
    }
    return out + s.slice(last);
  }

  // The start or the end of the text counts as whitespace (CommonMark).
  function isSpace(c) {
    return c === '' || c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v' || (c > '\x7f' && /\s/.test(c));
  }

  function isPunct(c) {
    return c !== '' && (ASCII_PUNCT.includes(c) || (c > '\x7f' && /[\p{P}\p{S}]/u.test(c)));
  }

  // The only link targets the page makes: web pages and mail addresses.
  function safeHref(url) {
    const head = url.slice(0, 8).toLowerCase();
    return head.startsWith('https://') || head.startsWith('http://') || head.startsWith('mailto:') ? url : null;
  }

  // Whether `text` has `scheme` (lower case) at `at`, in any case; no
  // allocation, as it runs at every `<` and `h` of a reply.
  function schemeAt(text, at, scheme) {
    if (at + scheme.length > text.length) return false;
    for (let k = 0; k < scheme.length; k++) {
      const c = text.charCodeAt(at + k);
      if ((c >= 65 && c <= 90 ? c + 32 : c) !== scheme.charCodeAt(k)) return false;
    }
    return true;
  }

  function linkTag(href) {
    return '<a href="' + escapeHtml(href) + '" rel="noopener noreferrer" target="_blank">';
  }

  // ----- inline: one scan, then emphasis resolved on the delimiter list -----

  // Text with none of the characters inline Markdown acts on is only escaped
  // (most table cells and many lines).
  const INLINE_SYNTAX = /[\\`*_~[\]<hH\n]/;

  function inline(src) {
    if (!INLINE_SYNTAX.test(src)) return escapeHtml(src);
    const n = src.length;
    // The output: HTML strings, and delimiter runs (objects) whose tags are
    // known only once emphasis is resolved.
    const nodes = [];
    let plain = 0; // start of the text not yet copied into `nodes`
    const flush = (end) => {
      if (end > plain) nodes.push(escapeHtml(src.slice(plain, end)));
    };

    // Delimiter runs that may still open or close, as a doubly linked list
    // (CommonMark's delimiter stack); `seq` orders them.
    let top = null;
    let seq = 0;
    const unlink = (d) => {
      if (d.prev) d.prev.next = d.next;
      if (d.next) d.next.prev = d.prev;
      if (top === d) top = d.prev;
    };
    // `[` openers, as three stacks of numbers (a reply of `[` makes
    // 100 000 of them): where it is in `nodes`, the delimiter seq below
    // the link text, and its order.
    const bracketNode = [];
    const bracketBottom = [];
    const bracketOrders = [];
    let bracketOrder = 0;
    let spentBrackets = 0; // openers up to this order are inactive: no links in links
    const autolinks = []; // {node, text}: undone when a link forms around them

    // Code spans: every backtick run, by length, so an opener finds its
    // closer without searching (a pointer per length only moves forward).
    const ticks = new Map();
    for (let i = src.indexOf('`'); i >= 0; i = src.indexOf('`', i)) {
      let j = i;
      while (src[j] === '`') j++;
      let runs = ticks.get(j - i);
      if (!runs) ticks.set(j - i, (runs = { starts: [], next: 0 }));
      runs.starts.push(i);
      i = j;
    }
    const closingTicks = (length, from) => {
      const runs = ticks.get(length);
      if (!runs) return -1;
      while (runs.next < runs.starts.length && runs.starts[runs.next] < from) runs.next++;
      return runs.next < runs.starts.length ? runs.starts[runs.next] : -1;
    };

    // Where the next `"` or `'` is, from any position: built on first use
    // by one backward pass, so link titles never search.
    const nextQuote = {};
    const quoteAt = (q, from) => {
      if (!nextQuote[q]) {
        const next = new Int32Array(n + 1).fill(-1);
        for (let k = n - 1; k >= 0; k--) next[k] = src[k] === q ? k : next[k + 1];
        nextQuote[q] = next;
      }
      return from <= n ? nextQuote[q][from] : -1;
    };

    const skipSpace = (j) => {
      let newlines = 0;
      while (j < n && (src[j] === ' ' || src[j] === '\t' || (src[j] === '\n' && newlines++ === 0))) j++;
      return j;
    };

    // `(destination "title")` after a `]` at `open - 1`: {href, end} or null.
    // The destination scan stops at whitespace or the closing parenthesis
    // and gives up past MAX_LINK_PARENS, so overlapping attempts stay
    // bounded.
    const linkTail = (open) => {
      if (src[open] !== '(') return null;
      let j = skipSpace(open + 1);
      let dest;
      if (src[j] === '<') {
        let k = j + 1;
        while (k < n && src[k] !== '>' && src[k] !== '<' && src[k] !== '\n') k++;
        if (src[k] !== '>') return null;
        dest = src.slice(j + 1, k);
        j = k + 1;
      } else {
        let k = j;
        let depth = 0;
        for (; k < n; k++) {
          const c = src[k];
          if (c === '\\' && k + 1 < n && ASCII_PUNCT.includes(src[k + 1])) k++;
          else if (c === '(') {
            if (++depth > MAX_LINK_PARENS) return null;
          } else if (c === ')') {
            if (depth === 0) break;
            depth--;
          } else if (c <= ' ') break;
        }
        if (depth !== 0) return null;
        dest = src.slice(j, k);
        j = k;
      }
      j = skipSpace(j);
      if (src[j] === '"' || src[j] === "'") {
        const close = quoteAt(src[j], j + 1);
        if (close < 0) return null;
        j = skipSpace(close + 1);
      }
      if (src[j] !== ')') return null;
      let href = '';
      for (let k = 0; k < dest.length; k++) {
        if (dest[k] === '\\' && k + 1 < dest.length && ASCII_PUNCT.includes(dest[k + 1])) k++;
        href += dest[k];
      }
      href = safeHref(href);
      return href === null ? null : { href, end: j + 1 };
    };

    // A bare http(s) URL at `i` (GFM's extended autolink, trailing
    // punctuation left out): its end, or -1.
    const urlEnd = (i, stopAtGt) => {
      const scheme = schemeAt(src, i, 'https://') ? 8 : schemeAt(src, i, 'http://') ? 7 : 0;
      if (!scheme) return -1;
      let j = i + scheme;
      let opens = 0;
      let closes = 0;
      for (; j < n; j++) {
        const c = src[j];
        if (c <= ' ' || c === '<' || c === '>' || c === '\x7f' || isSpace(c)) break;
        if (c === '(') opens++;
        else if (c === ')') closes++;
      }
      if (stopAtGt) return src[j] === '>' && j > i + scheme ? j : -1;
      for (;;) {
        const last = src[j - 1];
        if ('?!.,:*_~\'";'.includes(last)) j--;
        else if (last === ')' && closes > opens) {
          j--;
          closes--;
        } else break;
      }
      return j > i + scheme ? j : -1;
    };
    const pushAutolink = (url) => {
      nodes.push(linkTag(url) + escapeHtml(url) + '</a>');
      autolinks.push({ node: nodes.length - 1, text: url });
    };

    // CommonMark's "process emphasis" over the delimiters above `bottom`;
    // they are all spent afterwards. `openersBottom` remembers, per kind of
    // closer, how far down a failed search went, so no run is searched
    // twice: linear in the number of runs.
    const processEmphasis = (bottom) => {
      const openersBottom = new Int32Array(18); // by closer: char, can open, length % 3
      let closer = null;
      for (let d = top; d && d.seq > bottom; d = d.prev) closer = d;
      while (closer) {
        if (!closer.canClose) {
          closer = closer.next;
          continue;
        }
        const key = DELIMS.indexOf(closer.ch) * 6 + (closer.canOpen ? 3 : 0) + (closer.orig % 3);
        const floor = Math.max(bottom, openersBottom[key]);
        let opener = closer.prev;
        while (opener && opener.seq > floor && !pairs(opener, closer)) opener = opener.prev;
        if (opener && opener.seq > floor) {
          const strong = closer.ch === '~' || (opener.count >= 2 && closer.count >= 2);
          const tag = closer.ch === '~' ? 'del' : strong ? 'strong' : 'em';
          const use = strong ? 2 : 1;
          opener.count -= use;
          closer.count -= use;
          opener.open = '<' + tag + '>' + opener.open;
          closer.close += '</' + tag + '>';
          for (let d = closer.prev; d !== opener; d = d.prev) unlink(d);
          if (opener.count === 0) unlink(opener);
          if (closer.count === 0) {
            const next = closer.next;
            unlink(closer);
            closer = next;
          }
        } else {
          openersBottom[key] = Math.max(floor, closer.prev ? closer.prev.seq : 0);
          const next = closer.next;
          if (!closer.canOpen) unlink(closer);
          closer = next;
        }
      }
      while (top && top.seq > bottom) unlink(top);
    };

    let i = 0;
    while (i < n) {
      const c = src[i];
      if (c === '\n') {
        flush(i);
        nodes.push('<br>');
        plain = ++i;
      } else if (c === '\\') {
        const next = src[i + 1];
        if (next === '\n' || (next !== undefined && ASCII_PUNCT.includes(next))) {
          flush(i);
          nodes.push(next === '\n' ? '<br>' : escapeHtml(next));
          plain = i += 2;
        } else i++;
      } else if (c === '`') {
        let j = i;
        while (src[j] === '`') j++;
        const close = closingTicks(j - i, j);
        if (close < 0) {
          i = j; // no closer: the run is text
          continue;
        }
        flush(i);
        let code = src.slice(j, close).replaceAll('\n', ' ');
        if (code.length >= 2 && code[0] === ' ' && code[code.length - 1] === ' ' && code.trim() !== '') code = code.slice(1, -1);
        nodes.push('<code>' + escapeHtml(code) + '</code>');
        plain = i = close + (j - i);
      } else if (c === '*' || c === '_' || c === '~') {
        let j = i;
        while (src[j] === c) j++;
        if (c === '~' && j - i !== 2) {
          i = j; // strikethrough is exactly ~~
          continue;
        }
        const before = i > 0 ? src[i - 1] : '';
        const after = j < n ? src[j] : '';
        const left = !isSpace(after) && (!isPunct(after) || isSpace(before) || isPunct(before));
        const right = !isSpace(before) && (!isPunct(before) || isSpace(after) || isPunct(after));
        // `_` inside a word neither opens nor closes (snake_case stays text).
        const canOpen = c === '_' ? left && (!right || isPunct(before)) : left;
        const canClose = c === '_' ? right && (!left || isPunct(after)) : right;
        if (!canOpen && !canClose) {
          i = j;
          continue;
        }
        flush(i);
        const d = { ch: c, count: j - i, orig: j - i, canOpen, canClose, open: '', close: '', prev: top, next: null, seq: ++seq };
        if (top) top.next = d;
        top = d;
        nodes.push(d);
        plain = i = j;
      } else if (c === '[') {
        flush(i);
        nodes.push('[');
        bracketNode.push(nodes.length - 1);
        bracketBottom.push(top ? top.seq : 0);
        bracketOrders.push(++bracketOrder);
        plain = ++i;
      } else if (c === ']') {
        const openerNode = bracketNode.pop();
        const openerBottom = bracketBottom.pop();
        const openerOrder = bracketOrders.pop();
        const link = openerNode !== undefined && openerOrder > spentBrackets ? linkTail(i + 1) : null;
        if (!link) {
          i++; // no opener, or not a link the page makes: `]` is text
          continue;
        }
        flush(i);
        nodes[openerNode] = linkTag(link.href);
        processEmphasis(openerBottom);
        while (autolinks.length && autolinks[autolinks.length - 1].node > openerNode) {
          const inner = autolinks.pop();
          nodes[inner.node] = escapeHtml(inner.text);
        }
        nodes.push('</a>');
        spentBrackets = bracketOrder;
        plain = i = link.end;
      } else if (c === '<') {
        const end = urlEnd(i + 1, true);
        if (end < 0) {
          i++;
          continue;
        }
        flush(i);
        pushAutolink(src.slice(i + 1, end));
        plain = i = end + 1;
      } else if ((c === 'h' || c === 'H') && (i === 0 || isSpace(src[i - 1]) || '*_~('.includes(src[i - 1]))) {
        const end = urlEnd(i, false);
        if (end < 0) {
          i++;
          continue;
        }
        flush(i);
        pushAutolink(src.slice(i, end));
        plain = i = end;
      } else i++;
    }
    flush(n);
    processEmphasis(0);
    for (let k = 0; k < nodes.length; k++) {
      const node = nodes[k];
      if (typeof node !== 'string') nodes[k] = node.close + node.ch.repeat(node.count) + node.open;
    }
    return nodes.join('');
  }

  function pairs(opener, closer) {
    if (!opener.canOpen || opener.ch !== closer.ch) return false;
    // CommonMark's rule of three: `*a**b*` is not `<em>a</em>…`.
    const either = opener.canClose || closer.canOpen;
    return !(either && (opener.orig + closer.orig) % 3 === 0 && !(opener.orig % 3 === 0 && closer.orig % 3 === 0));
  }

  // ----- blocks: line by line -----

  function indentOf(line) {
    let k = 0;
    while (line[k] === ' ') k++;
    return k;
  }

  function isBlank(line) {
    for (let k = 0; k < line.length; k++) if (line[k] !== ' ' && line[k] !== '\t') return false;
    return true;
  }

  // Leading tabs as spaces (to the next multiple of 4), so indentation
  // is counted in columns.
  function expandTabs(line) {
    let k = 0;
    let tabs = false;
    for (; line[k] === ' ' || line[k] === '\t'; k++) tabs = tabs || line[k] === '\t';
    if (!tabs) return line;
    let lead = '';
    for (let m = 0; m < k; m++) lead += line[m] === '\t' ? ' '.repeat(4 - (lead.length % 4)) : ' ';
    return lead + line.slice(k);
  }

  // ``` or ~~~ (3 or more) opening a code block: {ch, len, lang}.
  function fenceOf(line) {
    const k = indentOf(line);
    const ch = line[k];
    if (k > 3 || (ch !== '`' && ch !== '~')) return null;
    let j = k;
    while (line[j] === ch) j++;
    if (j - k < 3) return null;
    const info = line.slice(j).trim();
    if (ch === '`' && info.includes('`')) return null;
    const word = info.split(' ', 1)[0];
    return { ch, len: j - k, lang: word.length <= 40 && /^[\w+#.-]+$/.test(word) ? word : '' };
  }

  function closesFence(line, fence) {
    const k = indentOf(line);
    if (k > 3) return false;
    let j = k;
    while (line[j] === fence.ch) j++;
    return j - k >= fence.len && line.slice(j).trim() === '';
  }

  function headingOf(line) {
    const k = indentOf(line);
    if (k > 3 || line[k] !== '#') return null;
    let j = k;
    while (line[j] === '#') j++;
    const level = j - k;
    if (level > 6 || (j < line.length && line[j] !== ' ' && line[j] !== '\t')) return null;
    let text = line.slice(j).trim();
    // An optional closing run of #, after a space.
    let end = text.length;
    while (end > 0 && text[end - 1] === '#') end--;
    if (end === 0 || text[end - 1] === ' ') text = text.slice(0, end).trim();
    return { level, text };
  }

  // ---, *** or ___ (spaces allowed): a thematic break.
  function isRule(line) {
    const k = indentOf(line);
    const ch = line[k];
    if (k > 3 || (ch !== '-' && ch !== '*' && ch !== '_')) return false;
    let count = 0;
    for (let j = k; j < line.length; j++) {
      if (line[j] === ch) count++;
      else if (line[j] !== ' ' && line[j] !== '\t') return false;
    }
    return count >= 3;
  }

  // The text after `>` (and one space), or null.
  function quoteOf(line) {
    const k = indentOf(line);
    if (k > 3 || line[k] !== '>') return null;
    return line.slice(line[k + 1] === ' ' ? k + 2 : k + 1);
  }

  // A list item's first line: {ordered, mark, start, indent, width, text};
  // `width` is the column its content starts at (continuation lines are
  // indented at least that much).
  function listItemOf(line) {
    const k = indentOf(line);
    if (k > 3) return null;
    let j = k;
    let ordered = false;
    let start = 1;
    const ch = line[k];
    if (ch === '-' || ch === '*' || ch === '+') j++;
    else {
      while (j < line.length && j - k < 9 && line[j] >= '0' && line[j] <= '9') j++;
      if (j === k || (line[j] !== '.' && line[j] !== ')')) return null;
      ordered = true;
      start = parseInt(line.slice(k, j), 10);
      j++;
    }
    const mark = line[j - 1];
    if (j < line.length && line[j] !== ' ' && line[j] !== '\t') return null;
    let spaces = 0;
    while (line[j + spaces] === ' ') spaces++;
    const text = line.slice(j + spaces);
    // Content starts after the marker and 1-4 spaces (more: the item's
    // text is indented code, kept as text here).
    const width = text === '' || spaces > 4 ? j + 1 : j + spaces;
    return { ordered, mark, start, indent: k, width, text: spaces > 4 ? line.slice(j + 1) : text };
  }

  // A GFM table's delimiter row (`| --- | :-: |`): the alignments, or null.
  function tableAlignments(line) {
    const cells = tableCells(line);
    if (!line.includes('-') || cells.length > MAX_TABLE_COLUMNS) return null;
    const aligns = [];
    for (const cell of cells) {
      let a = 0;
      let b = cell.length;
      const left = cell[a] === ':';
      if (left) a++;
      const right = b > a && cell[b - 1] === ':';
      if (right) b--;
      if (b <= a) return null;
      for (let k = a; k < b; k++) if (cell[k] !== '-') return null;
      aligns.push(left && right ? 'center' : right ? 'right' : left ? 'left' : '');
    }
    return aligns;
  }

  // A table row's cells, split on `|` (`\|` is a pipe in a cell).
  function tableCells(line) {
    let text = line.trim();
    if (text.startsWith('|')) text = text.slice(1);
    if (text.endsWith('|') && !text.endsWith('\\|')) text = text.slice(0, -1);
    const cells = [];
    let cell = '';
    for (let k = 0; k < text.length; k++) {
      if (text[k] === '\\' && text[k + 1] === '|') {
        cell += '|';
        k++;
      } else if (text[k] === '|') {
        cells.push(cell.trim());
        cell = '';
        if (cells.length > MAX_TABLE_COLUMNS) return cells;
      } else cell += text[k];
    }
    cells.push(cell.trim());
    return cells;
  }

  // Whether line `i` heads a table: a `|` in it and a delimiter row of as
  // many cells under it.
  function tableAt(lines, i) {
    if (i + 1 >= lines.length || !lines[i].includes('|') || !lines[i + 1].includes('|')) return null;
    const aligns = tableAlignments(lines[i + 1]);
    if (!aligns || tableCells(lines[i]).length !== aligns.length) return null;
    return aligns;
  }

  // Whether `line` starts a block that ends a paragraph.
  function interrupts(line, depth) {
    if (fenceOf(line) || headingOf(line) || isRule(line)) return true;
    if (depth >= MAX_NESTING) return false;
    if (quoteOf(line) !== null) return true;
    const item = listItemOf(line);
    return !!item && item.text !== '' && (!item.ordered || item.start === 1);
  }

  function codeBlock(code, lang) {
    const cls = lang ? ' class="language-' + escapeHtml(lang) + '"' : '';
    return '<div class="code-block"><button type="button" class="copy" title="Copy the code">Copy</button><pre><code' + cls + '>' + escapeHtml(code) + '</code></pre></div>';
  }

  // The HTML of `lines` as blocks. `depth` counts the quotes and lists
  // around them; `tight` leaves paragraphs without <p> (a tight list).
  function blocks(lines, depth, tight) {
    let out = '';
    let i = 0;
    const n = lines.length;
    while (i < n) {
      const line = lines[i];
      if (isBlank(line)) {
        i++;
        continue;
      }
      const fence = fenceOf(line);
      if (fence) {
        // An unclosed fence (mid-stream) runs to the end.
        let j = i + 1;
        while (j < n && !closesFence(lines[j], fence)) j++;
        out += codeBlock(lines.slice(i + 1, j).join('\n'), fence.lang);
        i = j + 1;
        continue;
      }
      const heading = headingOf(line);
      if (heading) {
        out += '<h' + heading.level + '>' + inline(heading.text) + '</h' + heading.level + '>';
        i++;
        continue;
      }
      if (isRule(line)) {
        out += '<hr>';
        i++;
        continue;
      }
      if (depth < MAX_NESTING && quoteOf(line) !== null) {
        const inner = [];
        for (let q; i < n && (q = quoteOf(lines[i])) !== null; i++) inner.push(q);
        out += '<blockquote>' + blocks(inner, depth + 1, false) + '</blockquote>';
        continue;
      }
      const item = depth < MAX_NESTING ? listItemOf(line) : null;
      if (item) {
        const made = list(lines, i, item, depth);
        out += made.html;
        i = made.next;
        continue;
      }
      const aligns = tableAt(lines, i);
      if (aligns) {
        const made = table(lines, i, aligns, depth);
        out += made.html;
        i = made.next;
        continue;
      }
      // A paragraph: up to a blank line or the start of another block.
      const para = [line.trim()];
      for (i++; i < n && !isBlank(lines[i]) && !interrupts(lines[i], depth) && !tableAt(lines, i); i++) para.push(lines[i].trim());
      const html = inline(para.join('\n'));
      out += tight ? html : '<p>' + html + '</p>';
    }
    return out;
  }

  // A list from line `i` (its first item `first`): {html, next}, `next`
  // being the first line after it.
  function list(lines, i, first, depth) {
    const n = lines.length;
    const items = [];
    let item = { lines: [first.text], width: first.width, indent: first.indent, filled: first.text !== '' };
    let loose = false;
    let blank = false; // a blank line was seen since the item's last line
    i++;
    for (; i < n; i++) {
      const line = lines[i];
      if (isBlank(line)) {
        blank = true;
        item.lines.push('');
        continue;
      }
      const indent = indentOf(line);
      const next = listItemOf(line.slice(Math.min(indent, item.indent)));
      if (indent >= item.width || (next && indent > item.indent && indent < item.width)) {
        // The item goes on (a nested list indented less than the item's
        // text, as models often write it, is nested too).
        if (blank && item.filled) loose = true;
        item.lines.push(line.slice(Math.min(indent, item.width)));
        item.filled = true;
        blank = false;
        continue;
      }
      const mark = next && indent <= 3 ? listItemOf(line) : null;
      if (mark && mark.ordered === first.ordered && mark.mark === first.mark) {
        if (blank) loose = true;
        items.push(item);
        item = { lines: [mark.text], width: mark.width, indent: mark.indent, filled: mark.text !== '' };
        blank = false;
        continue;
      }
      if (!blank && !interrupts(line, depth) && !tableAt(lines, i)) {
        item.lines.push(line.trim()); // a lazy continuation of the item's paragraph
        continue;
      }
      break;
    }
    items.push(item);
    for (const it of items) while (it.lines.length && it.lines[it.lines.length - 1] === '') it.lines.pop();
    const tag = first.ordered ? 'ol' : 'ul';
    let html = '<' + tag + (first.ordered && first.start !== 1 ? ' start="' + first.start + '"' : '') + '>';
    for (const it of items) html += '<li>' + blocks(it.lines, depth + 1, !loose) + '</li>';
    return { html: html + '</' + tag + '>', next: i };
  }

  // A GFM table from line `i`: {html, next}. Rows end at a blank line or
  // another block.
  function table(lines, i, aligns, depth) {
    const n = lines.length;
    // A short row is not padded with empty cells (the browser lays it
    // out), so a row's HTML is as long as its text, whatever the header.
    const row = (tag, cells) => {
      let html = '<tr>';
      for (let k = 0; k < aligns.length && k < cells.length; k++) {
        html += '<' + tag + (aligns[k] ? ' class="align-' + aligns[k] + '"' : '') + '>' + inline(cells[k]) + '</' + tag + '>';
      }
      return html + '</tr>';
    };
    let html = '<div class="table"><table><thead>' + row('th', tableCells(lines[i])) + '</thead><tbody>';
    for (i += 2; i < n && !isBlank(lines[i]) && !interrupts(lines[i], depth); i++) html += row('td', tableCells(lines[i]));
    return { html: html + '</tbody></table></div>', next: i };
  }

  function renderMarkdown(text) {
    const lines = text.split('\n');
    for (let k = 0; k < lines.length; k++) {
      let line = lines[k];
      if (line.endsWith('\r')) line = line.slice(0, -1);
      lines[k] = expandTabs(line);
    }
    return blocks(lines, 0, false);
  }

  // ---------- the page ----------

  function scrollDown() {
    const box = $('messages');
    box.scrollTop = box.scrollHeight;
  }

  function showMarkdown(div, text) {
    div.dataset.text = text;
    div.innerHTML = renderMarkdown(text);
    stats.renders++;
  }

  function addMessage(role, text) {
    const div = document.createElement('div');
    div.className = 'msg ' + role;
    div.dataset.text = text;
    if (role === 'assistant') showMarkdown(div, text);
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

  // A delta only appends to the streamed text; the bubble is rendered
  // again at most once per animation frame (none while the tab is hidden),
  // and after a costly render the next one waits RENDER_BACKOFF times as
  // long, so a long reply in many small deltas keeps the page responsive.
  function scheduleRender() {
    const pending = state.pending;
    if (pending.scheduled) return;
    pending.scheduled = true;
    const frame = () => requestAnimationFrame(() => {
      pending.scheduled = false;
      if (state.pending !== pending) return; // finished or switched away meanwhile
      const started = performance.now();
      showMarkdown(pending.div, pending.text);
      scrollDown(); // reads the layout, so the cost below includes it
      pending.nextAt = performance.now() + RENDER_BACKOFF * (performance.now() - started);
    });
    const wait = pending.nextAt - performance.now();
    if (wait > 0) setTimeout(frame, wait);
    else frame();
  }

  // Ends the streamed bubble, showing all of its text.
  function finishPending(text) {
    const pending = state.pending;
    state.pending = null;
    if (text !== pending.div.dataset.text) showMarkdown(pending.div, text);
    pending.div.classList.remove('streaming');
    return pending.div;
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
          state.pending = { div, text: '', scheduled: false, nextAt: 0 };
        }
        state.pending.text += event.text;
        scheduleRender();
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
          div = finishPending(event.text);
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
        if (state.pending) finishPending(state.pending.text);
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
        let scanned = 0; // the buffer holds no frame end before this (a long event comes in many reads)
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf('\n\n', scanned)) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            scanned = 0;
            for (const line of frame.split('\n')) {
              if (!line.startsWith('data: ')) continue;
              if (generation !== state.generation) return;
              await onEvent(JSON.parse(line.slice(6)));
            }
          }
          scanned = Math.max(0, buffer.length - 1);
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
    // One id per message: when the connection breaks before the answer
    // (the gateway restarting), the send is tried again with the same id
    // and the gateway takes it once, whether or not the first got through.
    const body = { session: state.session, text, id: newId() };
    for (let attempt = 0; ; attempt++) {
      try {
        await api('POST', '/chat/send', body);
        return;
      } catch (e) {
        const network = e instanceof TypeError; // fetch failed, no HTTP answer
        if (!network || attempt >= 5) {
          addNotice('Not sent: ' + e.message);
          setBusy(false);
          return;
        }
        await new Promise((r) => setTimeout(r, 500 * (attempt + 1)));
      }
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

  // The clipboard API where the page is a secure context (https, or
  // loopback), else the older selection-and-copy command.
  async function copyText(text) {
    try {
      if (navigator.clipboard) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (_) { /* refused: try the old way */ }
    const area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.className = 'offscreen';
    document.body.append(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand('copy');
    } catch (_) { /* not supported */ }
    area.remove();
    return ok;
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
  // A code block's copy button (no inline handlers: the CSP forbids them).
  $('messages').addEventListener('click', (e) => {
    const button = e.target.closest('button.copy');
    if (!button) return;
    const code = button.parentElement.querySelector('code');
    copyText(code ? code.textContent : '').then((ok) => {
      button.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => (button.textContent = 'Copy'), 1500);
    });
  });
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
