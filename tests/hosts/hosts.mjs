// How each host is registered with agentbox (the README's way), pointed at the
// scripted endpoint, and run non-interactively. Every host runs in its own
// temporary HOME (its config, its logs, agentbox's default state directory)
// and in a project directory under it; nothing outside that HOME is written.
//
// A host is { name, dialect, register(ctx), run(ctx) -> argv, env(ctx), logs(ctx) -> [files] }
// with ctx = { bin, home, project, port, bindir }.
import fs from 'node:fs';
import path from 'node:path';

const write = (file, text) => { fs.mkdirSync(path.dirname(file), { recursive: true }); fs.writeFileSync(file, text); };
const filesUnder = (dir) => {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile()).map((e) => path.join(e.parentPath ?? e.path, e.name));
};
const jsonLines = (text) => text.split('\n').filter(Boolean).map((l) => { try { return JSON.parse(l); } catch { return {}; } });
const url = (ctx) => `http://127.0.0.1:${ctx.port}`;

export const claude = {
  name: 'claude',
  title: 'Claude Code',
  dialect: 'Anthropic Messages',
  env: (ctx) => ({
    ANTHROPIC_BASE_URL: url(ctx), ANTHROPIC_API_KEY: 'sk-ant-scripted-endpoint',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_UPDATES: '1',
    DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1', MCP_TIMEOUT: '30000',
  }),
  // README: claude mcp add agentbox -- /path/to/agentbox/build/agentbox serve
  register: (ctx) => [['claude', 'mcp', 'add', 'agentbox', '--', ctx.bin, 'serve']],
  run: (ctx, prompt) => ['claude', '-p', prompt, '--output-format', 'stream-json', '--verbose',
    '--allowedTools', 'mcp__agentbox', '--model', 'claude-sonnet-4-5', '--debug-file', path.join(ctx.home, 'claude-debug.log')],
  logs: (ctx) => [path.join(ctx.home, 'claude-debug.log'), ...filesUnder(path.join(ctx.home, '.cache'))],
};

export const codex = {
  name: 'codex',
  title: 'Codex CLI',
  dialect: 'OpenAI Responses',
  env: (ctx) => ({ CODEX_HOME: path.join(ctx.home, '.codex'), SCRIPTED_API_KEY: 'sk-scripted-endpoint', RUST_LOG: 'warn' }),
  register(ctx) {
    // README: the [mcp_servers.agentbox] block, verbatim but for the path.
    write(path.join(ctx.home, '.codex', 'config.toml'), [
      'model = "gpt-5.1-codex"', 'model_provider = "scripted"', 'approval_policy = "never"',
      'check_for_update_on_startup = false', '',
      '[analytics]', 'enabled = false', '',
      // Plugin and app sync reach github.com and chatgpt.com at start-up.
      '[features]', 'plugins = false', 'remote_plugin = false', 'apps = false', 'in_app_updates = false', '',
      '[model_providers.scripted]', 'name = "scripted endpoint"', `base_url = "${url(ctx)}/v1"`,
      'wire_api = "responses"', 'env_key = "SCRIPTED_API_KEY"', 'request_max_retries = 0', 'stream_max_retries = 0', '',
      '[mcp_servers.agentbox]', `command = "${ctx.bin}"`, 'args = ["serve"]', 'startup_timeout_sec = 10', 'tool_timeout_sec = 600',
      // codex exec asks no one: without this Codex refuses every tool not marked read-only.
      'default_tools_approval_mode = "approve"', '',
    ].join('\n'));
    return [];
  },
  run: (ctx, prompt) => ['codex', 'exec', '--skip-git-repo-check', '--json', prompt],
  logs: (ctx) => filesUnder(path.join(ctx.home, '.codex', 'log')),
  // The Responses API has no error flag on a function_call_output; Codex's own
  // --json event stream says whether it took the call as failed (isError).
  errorFlags(stdout) {
    return jsonLines(stdout).filter((e) => e.type === 'item.completed' && e.item?.type === 'mcp_tool_call' && e.item.server === 'agentbox')
      .map((e) => e.item.status === 'failed');
  },
};

export const gemini = {
  name: 'gemini',
  title: 'Gemini CLI',
  dialect: 'Gemini generateContent',
  env: (ctx) => ({ GEMINI_API_KEY: 'scripted-endpoint', GOOGLE_GEMINI_BASE_URL: url(ctx), GEMINI_CLI_NO_RELAUNCH: 'true' }),
  register(ctx) {
    write(path.join(ctx.home, '.gemini', 'settings.json'), JSON.stringify({
      security: { auth: { selectedType: 'gemini-api-key' } },
      privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false },
      general: { disableAutoUpdate: true, disableUpdateNag: true, enableAutoUpdate: false, enableAutoUpdateNotification: false },
    }, null, 2));
    // README: trust the project folder (trustedFolders.json), then gemini mcp add.
    write(path.join(ctx.home, '.gemini', 'trustedFolders.json'), JSON.stringify({ [ctx.project]: 'TRUST_FOLDER' }, null, 2));
    // Project scope (the default) writes .gemini/settings.json in the project, which
    // Gemini CLI reads only in a trusted folder.
    return [['gemini', 'mcp', 'add', 'agentbox', ctx.bin, 'serve']];
  },
  run: (ctx, prompt) => ['gemini', '-p', prompt, '--yolo', '--output-format', 'stream-json', '-m', 'gemini-2.5-flash'],
  logs: (ctx) => filesUnder(path.join(ctx.home, '.gemini', 'tmp')).filter((f) => f.endsWith('.log')),
};

export const opencode = {
  name: 'opencode',
  title: 'opencode',
  dialect: 'OpenAI chat completions (@ai-sdk/openai-compatible)',
  env: () => ({ OPENCODE_DISABLE_AUTOUPDATE: 'true', OPENCODE_DISABLE_MODELS_FETCH: 'true', OPENCODE_DISABLE_SHARE: 'true',
    OPENCODE_DISABLE_LSP_DOWNLOAD: 'true', OPENCODE_DISABLE_DEFAULT_PLUGINS: 'true', OPENCODE_DISABLE_TERMINAL_TITLE: 'true',
    OPENCODE_DISABLE_CLAUDE_CODE: 'true', OPENCODE_DISABLE_EXTERNAL_SKILLS: 'true', OPENCODE_PERMISSION: JSON.stringify({ '*': 'allow' }) }),
  register(ctx) {
    // README: the "mcp" block of opencode.json; the provider is the scripted endpoint.
    write(path.join(ctx.home, '.config', 'opencode', 'opencode.json'), JSON.stringify({
      $schema: 'https://opencode.ai/config.json',
      autoupdate: false, share: 'disabled',
      provider: { scripted: { npm: '@ai-sdk/openai-compatible', name: 'scripted endpoint',
        options: { baseURL: `${url(ctx)}/v1`, apiKey: 'scripted-endpoint' }, models: { 'scripted-model': { name: 'scripted model', tool_call: true } } } },
      model: 'scripted/scripted-model', small_model: 'scripted/scripted-model',
      mcp: { agentbox: { type: 'local', command: [ctx.bin, 'serve'], enabled: true } },
    }, null, 2));
    return [];
  },
  run: (ctx, prompt) => ['opencode', 'run', '-m', 'scripted/scripted-model', '--format', 'json', '--print-logs', prompt],
  logs: (ctx) => filesUnder(path.join(ctx.home, '.local', 'share', 'opencode', 'log')),
  // Chat completions have no error flag on a tool message; opencode's --format
  // json events say whether it took the call as an error.
  errorFlags(stdout) {
    return jsonLines(stdout).filter((e) => e.type === 'tool_use' && /agentbox/.test(e.part?.tool ?? ''))
      .map((e) => e.part.state?.status === 'error');
  },
};

export const qwen = {
  name: 'qwen',
  title: 'Qwen Code',
  dialect: 'Anthropic Messages (--auth-type anthropic)',
  env: (ctx) => ({ ANTHROPIC_BASE_URL: url(ctx), ANTHROPIC_API_KEY: 'sk-ant-scripted-endpoint', ANTHROPIC_MODEL: 'claude-sonnet-4-5' }),
  register(ctx) {
    write(path.join(ctx.home, '.qwen', 'settings.json'), JSON.stringify({
      security: { auth: { selectedType: 'anthropic' } },
      privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false },
      general: { disableAutoUpdate: true, disableUpdateNag: true, enableAutoUpdate: false },
    }, null, 2));
    // README: qwen mcp add --scope user agentbox /path/to/agentbox/build/agentbox serve
    return [['qwen', 'mcp', 'add', '--scope', 'user', 'agentbox', ctx.bin, 'serve']];
  },
  run: (ctx, prompt) => ['qwen', '--auth-type', 'anthropic', '-m', 'claude-sonnet-4-5', '-p', prompt, '--yolo', '--output-format', 'stream-json'],
  logs: (ctx) => filesUnder(path.join(ctx.home, '.qwen', 'tmp')).filter((f) => f.endsWith('.log')),
};

export const all = [claude, codex, gemini, opencode, qwen];
