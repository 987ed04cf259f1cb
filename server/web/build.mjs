// Bundles the status page with esbuild: node build.mjs NODE_MODULES OUT_DIR.
// Run by CMake (server/CMakeLists.txt) after `npm ci` into the build tree,
// so node_modules and the output never land in the source tree.
import { createRequire } from 'node:module';
import { copyFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [modules, out] = process.argv.slice(2);
if (!modules || !out) {
  console.error('usage: node build.mjs NODE_MODULES OUT_DIR');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(path.resolve(modules), 'index.js'));
const esbuild = require('esbuild');

mkdirSync(out, { recursive: true });
const common = {
  bundle: true,
  minify: true,
  logLevel: 'warning',
  nodePaths: [path.resolve(modules)],
  // Browsers of the last few years; Debian 12's Chromium among them.
  target: ['chrome100', 'firefox100', 'safari15'],
  legalComments: 'eof',
};
await esbuild.build({
  ...common,
  entryPoints: [path.join(here, 'src', 'main.js')],
  format: 'iife',
  outfile: path.join(out, 'app.js'),
});
await esbuild.build({
  ...common,
  entryPoints: [path.join(here, 'src', 'style.css')],
  outfile: path.join(out, 'app.css'),
});
copyFileSync(path.join(here, 'src', 'index.html'), path.join(out, 'index.html'));
copyFileSync(path.join(here, 'src', 'favicon.svg'), path.join(out, 'favicon.svg'));
