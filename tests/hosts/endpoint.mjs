// The scripted model endpoint: an HTTP server on 127.0.0.1 that answers a
// host's model requests in the host's own API (dialects.mjs). A request that
// offers agentbox's tools is the agent loop: the endpoint answers it with the
// next tool call of the scenario (scenario.mjs) and keeps the results the host
// sent back for the calls before. Any other request (titles, summaries, the
// hosts' own side questions) gets a short text, or JSON where the host asks
// for JSON. Every request is logged to requests.jsonl for the report.
import http from 'node:http';
import fs from 'node:fs';
import * as dialects from './dialects.mjs';
import { steps, argsFor, FINAL_TEXT } from './scenario.mjs';

const ID = /ab_s(\d+)$/;   // ids of the endpoint's own calls carry the step number
const SEARCH_ID = 'ab_toolsearch';

function route(method, url) {
  const path = url.split('?')[0];
  if (method === 'GET' && /\/models\/?$/.test(path)) return { kind: 'models' };
  if (method !== 'POST') return null;
  if (path.endsWith('/messages/count_tokens')) return { kind: 'count', reply: { input_tokens: 100 } };
  if (path.endsWith(':countTokens')) return { kind: 'count', reply: { totalTokens: 100 } };
  if (path.endsWith('/messages')) return { kind: 'model', dialect: dialects.anthropic };
  if (path.endsWith('/responses')) return { kind: 'model', dialect: dialects.responses };
  if (path.endsWith('/chat/completions')) return { kind: 'model', dialect: dialects.chat };
  if (path.endsWith(':streamGenerateContent')) return { kind: 'model', dialect: dialects.gemini, stream: true };
  if (path.endsWith(':generateContent')) return { kind: 'model', dialect: dialects.gemini, stream: false };
  return null;
}

// Maps the scenario's tool names (exec, file_read, ...) to the host's names for
// them (mcp__agentbox__exec, agentbox__exec, agentbox_exec, ...), from the
// tools the request offers and, for tools a host defers behind a search tool,
// from any name of that shape that the request mentions.
export function toolNames(tools, body) {
  const offered = new Set(tools.map((t) => t.name));
  const mentioned = new Set(stringsIn(body).flatMap((s) => s.match(/[A-Za-z0-9_-]*agentbox[A-Za-z0-9_-]*/g) ?? []));
  const names = {};
  for (const want of new Set(steps.map((s) => s.tool))) {
    const fits = (n) => n.endsWith(want) && /agentbox[_-]*$/.test(n.slice(0, -want.length));
    names[want] = [...offered].find(fits) ?? null;
    if (!names[want]) names[want] = [...mentioned].find(fits) ? { deferred: [...mentioned].find(fits) } : null;
  }
  return names;
}

function stringsIn(v, out = []) {
  if (typeof v === 'string') out.push(v);
  else if (v && typeof v === 'object') for (const x of Object.values(v)) stringsIn(x, out);
  return out;
}

function sideAnswer(dialect, body) {
  const cfg = body.generationConfig ?? body.config ?? {};
  if (dialect === dialects.gemini && /json/.test(cfg.responseMimeType ?? '')) {
    // Gemini CLI's own JSON side questions (next speaker, routing, loop check).
    return JSON.stringify({ reasoning: 'scripted endpoint', next_speaker: 'user', model_choice: 'flash',
      complexity_reasoning: 'scripted', complexity_score: 1, unproductive_state_confidence: 0, unproductive_state_analysis: 'none' });
  }
  return 'Scripted endpoint.';
}

export class Endpoint {
  constructor(logFile) {
    this.logFile = logFile;
    this.seen = [];          // seen[i]: the result of step i as the host showed it to the model
    this.names = null;       // the host's tool names, from the first agent request
    this.requests = 0;
    this.agentRequests = 0;
    this.finished = false;
    this.problems = [];
    this.server = http.createServer((req, res) => this.handle(req, res));
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => resolve(this.server.address().port)));
  }

  close() { this.server.closeAllConnections?.(); return new Promise((r) => this.server.close(r)); }

  log(entry) { fs.appendFileSync(this.logFile, `${JSON.stringify(entry)}\n`); }

  handle(req, res) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      this.requests++;
      try {
        this.respond(req, res, raw);
      } catch (e) {
        this.problems.push(`endpoint failed on ${req.method} ${req.url}: ${e.stack}`);
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: String(e) } }));
      }
    });
  }

  respond(req, res, raw) {
    const r = route(req.method, req.url);
    const body = raw ? JSON.parse(raw) : {};
    if (!r) {
      this.log({ method: req.method, url: req.url, answered: 404 });
      res.writeHead(404, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ error: { message: 'not served by the scripted endpoint' } }));
    }
    if (r.kind === 'models') { this.log({ method: req.method, url: req.url, answered: 'models' }); return this.models(res); }
    if (r.kind === 'count') { res.writeHead(200, { 'content-type': 'application/json' }); return res.end(JSON.stringify(r.reply)); }
    const { dialect } = r;
    const stream = r.stream ?? body.stream === true;
    const parsed = dialect.parse(body);
    const names = toolNames(parsed.tools, body);
    const action = this.next(parsed, names, dialect, body);
    this.log({ method: req.method, url: req.url, dialect: dialect.name, stream, tools: parsed.tools.map((t) => t.name),
      calls: parsed.calls.length, results: parsed.results.map((x) => ({ id: x.id, isError: x.isError, chars: x.text.length, head: x.text.slice(0, 400), tail: x.text.slice(-200) })),
      answer: action, body: raw.length < 400000 ? body : '(large)' });
    dialect.answer(res, action, body, stream);
  }

  models(res) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ object: 'list', data: [], models: [] }));
  }

  // The next move of the conversation, from what the request already holds.
  next(parsed, names, dialect, body) {
    const isAgent = parsed.tools.length > 0 && Object.values(names).some((n) => n);
    if (!isAgent) return { kind: 'text', text: sideAnswer(dialect, body) };
    this.agentRequests++;
    this.names ??= names;
    const ours = parsed.calls.filter((c) => ID.test(c.id ?? '') || c.id === SEARCH_ID ||
      Object.values(names).some((n) => n && (n === c.name || n.deferred === c.name)));
    const stepCalls = ours.filter((c) => c.id !== SEARCH_ID && !/ToolSearch/i.test(c.name ?? ''));
    // Results: by the step number in the id, else (a host that drops ids) by position.
    parsed.results.forEach((res, k) => {
      const m = ID.exec(res.id ?? '');
      const idx = m ? Number(m[1]) : stepCalls.indexOf(ours[k]);
      if (idx >= 0 && idx < steps.length) this.seen[idx] = res;
    });
    const i = stepCalls.length;
    if (i >= steps.length) { this.finished = true; return { kind: 'text', text: FINAL_TEXT }; }
    const step = steps[i];
    const name = names[step.tool];
    if (name?.deferred) {
      const search = parsed.tools.find((t) => /^ToolSearch$/i.test(t.name));
      if (search && !ours.some((c) => c.id === SEARCH_ID)) {
        const all = Object.values(names).filter(Boolean).map((n) => n.deferred ?? n);
        return { kind: 'tool', id: SEARCH_ID, name: search.name, args: { query: `select:${all.join(',')}`, max_results: all.length } };
      }
      return { kind: 'tool', id: `call_ab_s${i}`, name: name.deferred, args: argsFor(step, this.seen) };
    }
    if (!name) {
      this.problems.push(`the host offers no tool for ${step.tool} (tools: ${parsed.tools.map((t) => t.name).join(', ')})`);
      return { kind: 'text', text: `No ${step.tool} tool is offered; stopping.` };
    }
    const call = parsed.tools.find((t) => t.name === name)?.call;
    return { kind: 'tool', id: `call_ab_s${i}`, name, ...(call && { call }), args: argsFor(step, this.seen) };
  }
}
