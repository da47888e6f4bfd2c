// The four model APIs the hosts speak, reduced to what the scripted endpoint
// needs: read the tools offered and the tool calls/results already in the
// conversation from a request, and write one answer (a tool call or a final
// text), streamed as server-sent events when the request asks for it.
//
// parse(body) -> { tools: [{name, schema}], calls: [{id, name}], results: [{id, name, text, isError, raw}] }
// answer(res, action, body, stream) where action = {kind:'tool', id, name, args} | {kind:'text', text}

const sse = (res) => res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
const json = (res, obj) => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify(obj)); };
const textOf = (content) => {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content == null ? '' : JSON.stringify(content);
  return content.map((c) => (typeof c === 'string' ? c : c.text ?? c.content ?? JSON.stringify(c))).join('\n');
};

// Anthropic Messages (Claude Code): POST /v1/messages[?beta=true].
export const anthropic = {
  name: 'anthropic',
  parse(body) {
    const tools = (body.tools ?? []).map((t) => ({ name: t.name, schema: t.input_schema, deferred: !!t.defer_loading }));
    const calls = [], results = [];
    for (const m of body.messages ?? []) {
      if (!Array.isArray(m.content)) continue;
      for (const b of m.content) {
        if (b.type === 'tool_use') calls.push({ id: b.id, name: b.name });
        if (b.type === 'tool_result') results.push({ id: b.tool_use_id, text: textOf(b.content), isError: b.is_error === true, raw: b });
      }
    }
    return { tools, calls, results };
  },
  answer(res, action, body, stream) {
    const block = action.kind === 'tool'
      ? { type: 'tool_use', id: action.id, name: action.name, input: action.args }
      : { type: 'text', text: action.text };
    const stop = action.kind === 'tool' ? 'tool_use' : 'end_turn';
    const message = { id: `msg_${Date.now()}`, type: 'message', role: 'assistant', model: body.model,
      content: [block], stop_reason: stop, stop_sequence: null, usage: { input_tokens: 100, output_tokens: 20 } };
    if (!stream) return json(res, message);
    sse(res);
    const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    ev('message_start', { message: { ...message, content: [], stop_reason: null, usage: { input_tokens: 100, output_tokens: 1 } } });
    if (action.kind === 'tool') {
      ev('content_block_start', { index: 0, content_block: { ...block, input: {} } });
      ev('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: JSON.stringify(action.args) } });
    } else {
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: action.text } });
    }
    ev('content_block_stop', { index: 0 });
    ev('message_delta', { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 20 } });
    ev('message_stop', {});
    res.end();
  },
};

// OpenAI Responses (Codex): POST /v1/responses, always streamed.
export const responses = {
  name: 'responses',
  parse(body) {
    const tools = [];
    // Codex groups an MCP server's tools in a namespace (mcp__agentbox) whose
    // functions are called by their own name plus the namespace.
    for (const t of body.tools ?? []) {
      if (t.type === 'function') tools.push({ name: t.name, schema: t.parameters });
      if (t.type === 'namespace') {
        for (const f of t.tools ?? []) tools.push({ name: `${t.name}__${f.name}`, schema: f.parameters, call: { name: f.name, namespace: t.name } });
      }
    }
    const calls = [], results = [];
    for (const item of Array.isArray(body.input) ? body.input : []) {
      if (item.type === 'function_call') calls.push({ id: item.call_id, name: item.namespace ? `${item.namespace}__${item.name}` : item.name });
      if (item.type === 'function_call_output') {
        const out = item.output;
        const text = typeof out === 'string' ? out : textOf(out?.content ?? out);
        results.push({ id: item.call_id, text, isError: out?.success === false ? true : out?.success === true ? false : undefined, raw: item });
      }
    }
    return { tools, calls, results };
  },
  answer(res, action, body) {
    const id = `resp_${Date.now()}`;
    const item = action.kind === 'tool'
      ? { type: 'function_call', id: `fc_${action.id}`, call_id: action.id, ...(action.call ?? { name: action.name }),
        arguments: JSON.stringify(action.args), status: 'completed' }
      : { type: 'message', id: `msg_${Date.now()}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: action.text, annotations: [] }] };
    const usage = { input_tokens: 100, input_tokens_details: { cached_tokens: 0 }, output_tokens: 20,
      output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 120 };
    const response = { id, object: 'response', created_at: Math.floor(Date.now() / 1000), model: body.model, status: 'in_progress', output: [] };
    sse(res);
    const ev = (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    ev('response.created', { response });
    ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress' } });
    if (action.kind === 'text') ev('response.output_text.delta', { item_id: item.id, output_index: 0, content_index: 0, delta: action.text });
    ev('response.output_item.done', { output_index: 0, item });
    ev('response.completed', { response: { ...response, status: 'completed', output: [item], usage } });
    res.end();
  },
};

// Gemini generateContent (Gemini CLI): POST /v1beta/models/M:streamGenerateContent?alt=sse
// or :generateContent. Gemini's function calls carry no required id, so
// results are matched to calls by position when the host sends no id back.
export const gemini = {
  name: 'gemini',
  parse(body) {
    const tools = [];
    for (const t of body.tools ?? []) for (const f of t.functionDeclarations ?? []) tools.push({ name: f.name, schema: f.parametersJsonSchema ?? f.parameters });
    const calls = [], results = [];
    for (const c of body.contents ?? []) {
      for (const p of c.parts ?? []) {
        if (p.functionCall) calls.push({ id: p.functionCall.id, name: p.functionCall.name });
        if (p.functionResponse) {
          const r = p.functionResponse.response ?? {};
          const isError = 'error' in r ? true : undefined;
          const text = typeof r.output === 'string' ? r.output : typeof r.error === 'string' ? r.error : textOf(r.error ?? r.output ?? r.content ?? r);
          results.push({ id: p.functionResponse.id ?? calls[results.length]?.id, name: p.functionResponse.name, text, isError, raw: p.functionResponse });
        }
      }
    }
    return { tools, calls, results };
  },
  answer(res, action, body, stream) {
    const part = action.kind === 'tool' ? { functionCall: { id: action.id, name: action.name, args: action.args } } : { text: action.text };
    const chunk = { candidates: [{ content: { role: 'model', parts: [part] }, finishReason: 'STOP', index: 0 }],
      usageMetadata: { promptTokenCount: 100, candidatesTokenCount: 20, totalTokenCount: 120 }, modelVersion: 'scripted' };
    if (!stream) return json(res, chunk);
    sse(res);
    res.write(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
    res.end();
  },
};

// OpenAI chat completions (opencode through @ai-sdk/openai-compatible): POST /v1/chat/completions.
export const chat = {
  name: 'chat',
  parse(body) {
    const tools = (body.tools ?? []).map((t) => ({ name: t.function?.name, schema: t.function?.parameters }));
    const calls = [], results = [];
    for (const m of body.messages ?? []) {
      for (const c of m.tool_calls ?? []) calls.push({ id: c.id, name: c.function?.name });
      if (m.role === 'tool') results.push({ id: m.tool_call_id, text: textOf(m.content), isError: undefined, raw: m });
    }
    return { tools, calls, results };
  },
  answer(res, action, body, stream) {
    const created = Math.floor(Date.now() / 1000);
    const base = { id: `chatcmpl_${Date.now()}`, created, model: body.model };
    const finish = action.kind === 'tool' ? 'tool_calls' : 'stop';
    const usage = { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 };
    const call = action.kind === 'tool' && { id: action.id, type: 'function', function: { name: action.name, arguments: JSON.stringify(action.args) } };
    if (!stream) {
      const message = call ? { role: 'assistant', content: null, tool_calls: [call] } : { role: 'assistant', content: action.text };
      return json(res, { ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason: finish }], usage });
    }
    sse(res);
    const chunk = (delta, finish_reason = null, extra = {}) =>
      res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason }], ...extra })}\n\n`);
    chunk(call ? { role: 'assistant', tool_calls: [{ index: 0, ...call }] } : { role: 'assistant', content: action.text });
    chunk({}, finish, { usage });
    res.write('data: [DONE]\n\n');
    res.end();
  },
};
