// The in-box halves of code contexts (code_contexts.h): one script per
// language, run by the box's own interpreter (python3 -c, node -e, bash -c).
// Each reads cells from fd 3 and answers on fd 4, while the cell's output
// goes to the interpreter's own stdout and stderr (fds 1 and 2, pipes the
// agent reads), so a subprocess's output is the cell's output too.
//
// Python and JavaScript: a request is one JSON line {code, result_chars,
// max_images, max_image_bytes}; the reply one JSON line {result, error,
// images, ...}. Python runs a cell as its module body minus a last
// expression, which is evaluated apart for `result` (repr); SIGINT is
// KeyboardInterrupt, and it is held off while a reply is written so a late
// one cannot tear it. matplotlib runs on Agg, show() does nothing, and every
// figure open after a cell is sent as a PNG and closed. JavaScript runs a
// cell with vm.runInContext (breakOnSigint), awaits a Promise result, and
// SIGINT ends that wait too. Bash: a request is the code and a NUL; the
// reply is the cell's exit status and a newline; SIGINT makes the cell's
// function return 130 (its trap), so the shell and its variables stay.
#include "agent/code_contexts.h"

namespace agentbox::agent {

const char* const kPythonDriver = R"driver(import ast, base64, io, json, linecache, os, signal, sys, traceback, warnings

def _agentbox_driver():
    os.set_inheritable(3, False)
    os.set_inheritable(4, False)
    requests = os.fdopen(3, 'rb', buffering=0)
    replies = os.fdopen(4, 'wb', buffering=0)
    os.environ.setdefault('MPLBACKEND', 'Agg')
    warnings.filterwarnings('ignore', message='.*(non-GUI backend|non-interactive).*')
    namespace = {'__name__': '__main__', '__builtins__': __builtins__}
    sys.path.insert(0, '')
    count = 0

    def figures(limit_count, limit_bytes):
        plt = sys.modules.get('matplotlib.pyplot')
        if plt is None:
            return [], False
        plt.show = lambda *args, **kwargs: None
        images, cut, used = [], False, 0
        for number in plt.get_fignums():
            figure = plt.figure(number)
            if len(images) < limit_count:
                buffer = io.BytesIO()
                figure.savefig(buffer, format='png')
                data = base64.b64encode(buffer.getvalue()).decode('ascii')
                if used + len(data) <= limit_bytes:
                    images.append(data)
                    used += len(data)
                else:
                    cut = True
            else:
                cut = True
            plt.close(figure)
        return images, cut

    def error_of(e, skip):
        tb = e.__traceback__
        for _ in range(skip):
            if tb is not None:
                tb = tb.tb_next
        if isinstance(e, SyntaxError):
            text = ''.join(traceback.format_exception_only(type(e), e))
        else:
            text = ''.join(traceback.format_exception(type(e), e, tb))
        return {'name': type(e).__name__, 'value': str(e), 'traceback': text}

    def run(request):
        nonlocal count
        count += 1
        code = request['code']
        name = '<cell %d>' % count
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        reply = {'result': None, 'error': None, 'images': [], 'images_truncated': False}
        try:
            tree = ast.parse(code, name, 'exec')
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, 'exec'), namespace)
            if last is not None:
                value = eval(compile(last, name, 'eval'), namespace)
                if value is not None:
                    text = repr(value)
                    limit = request.get('result_chars', 30000)
                    if len(text) > limit:
                        text = text[:limit]
                        reply['result_truncated'] = True
                    reply['result'] = text
        except SyntaxError as e:
            reply['error'] = error_of(e, 0)
        except BaseException as e:
            reply['error'] = error_of(e, 1)
        try:
            reply['images'], reply['images_truncated'] = figures(request.get('max_images', 8), request.get('max_image_bytes', 4 << 20))
        except BaseException as e:
            reply['images_error'] = error_of(e, 0)
        return reply

    while True:
        try:
            line = requests.readline()
        except KeyboardInterrupt:
            continue
        if not line:
            return
        try:
            reply = run(json.loads(line))
        except BaseException as e:
            reply = {'result': None, 'error': {'name': type(e).__name__, 'value': str(e), 'traceback': ''}, 'images': []}
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
        try:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            replies.write(json.dumps(reply).encode('ascii') + b'\n')
        finally:
            try:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
            except KeyboardInterrupt:
                pass

_agentbox_driver()
)driver";

const char* const kNodeDriver = R"driver('use strict';
const fs = require('fs');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const Module = require('module');

const requireHere = Module.createRequire(process.cwd() + '/');
const sandbox = {
  require: requireHere, console, process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
  structuredClone: globalThis.structuredClone, fetch: globalThis.fetch, AbortController, performance: globalThis.performance,
};
sandbox.global = sandbox;
const context = vm.createContext(sandbox);
let interrupt = null;
process.on('SIGINT', () => { if (interrupt) interrupt(); });

function errorOf(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
    // The driver's own frames (vm, this script) are cut from the stack.
    const lines = String(e.stack ?? '').split('\n');
    const own = lines.findIndex((l, i) => i > 0 && /node:vm:|\[eval\]/.test(l));
    return { name: String(e.name ?? 'Error'), value: String(e.message ?? ''), traceback: (own > 0 ? lines.slice(0, own) : lines).join('\n') };
  }
  return { name: 'thrown', value: util.inspect(e), traceback: '' };
}

async function run(request, count) {
  const reply = { result: null, error: null, images: [] };
  try {
    const script = new vm.Script(request.code, { filename: `<cell ${count}>` });
    let value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
    if (value && typeof value.then === 'function') {
      value = await new Promise((resolve, reject) => {
        interrupt = () => reject(Object.assign(new Error('Script execution interrupted.'), { name: 'Interrupted' }));
        value.then(resolve, reject);
      });
    }
    if (value !== undefined) {
      let text = util.inspect(value);
      const limit = request.result_chars ?? 30000;
      if (text.length > limit) { text = text.slice(0, limit); reply.result_truncated = true; }
      reply.result = text;
    }
  } catch (e) {
    reply.error = errorOf(e);
  } finally {
    interrupt = null;
  }
  return reply;
}

(async () => {
  const lines = readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }), crlfDelay: Infinity });
  let count = 0;
  for await (const line of lines) {
    let reply;
    try {
      reply = await run(JSON.parse(line), ++count);
    } catch (e) {
      reply = { result: null, error: errorOf(e), images: [] };
    }
    fs.writeSync(4, JSON.stringify(reply) + '\n');
  }
  process.exit(0);
})();
)driver";

const char* const kBashDriver = R"driver(__agentbox_cell() { eval "$1"; }
trap 'builtin return 130 2>/dev/null' INT
while IFS= read -r -d '' __agentbox_code <&3; do
  __agentbox_cell "$__agentbox_code" 3<&- 4>&-
  printf '%d\n' "$?" >&4
done
)driver";

}  // namespace agentbox::agent
