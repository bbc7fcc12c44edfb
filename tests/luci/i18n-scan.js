#!/usr/bin/env node
/*
 * The translation template of luci-app-nodeportd: every _('...') of the views and every
 * menu title, as po/templates/nodeportd.pot (the file translators start from, as LuCI
 * apps ship it). `node i18n-scan.js` prints it; `node i18n-scan.js --check` fails when
 * the committed template is not what the sources give (tests/luci/run.sh).
 */
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '../..');
const app = path.join(root, 'openwrt-package/luci-app-nodeportd');
const viewDir = 'htdocs/luci-static/resources/view/nodeportd';
const pot = path.join(app, 'po/templates/nodeportd.pot');

const strings = new Map();
function add(msgid, where) {
	if (!strings.has(msgid))
		strings.set(msgid, []);
	strings.get(msgid).push(where);
}

/* A single-quoted JS string's value. */
function unquote(s) {
	return s.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (m, c) => c[0] === 'u' ? String.fromCharCode(parseInt(c.slice(1), 16)) : ({ n: '\n', t: '\t' }[c] || c));
}

for (const f of fs.readdirSync(path.join(app, viewDir)).sort()) {
	const src = fs.readFileSync(path.join(app, viewDir, f), 'utf8');
	for (const m of src.matchAll(/\b_\(\s*'((?:[^'\\]|\\.)*)'\s*[,)]/g)) {
		const line = src.slice(0, m.index).split('\n').length;
		add(unquote(m[1]), `${viewDir}/${f}:${line}`);
	}
}
const menuFile = 'root/usr/share/luci/menu.d/luci-app-nodeportd.json';
for (const node of Object.values(JSON.parse(fs.readFileSync(path.join(app, menuFile), 'utf8'))))
	if (node.title)
		add(node.title, menuFile);

const po = (s) => '"' + s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';
let out = 'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8"\n';
for (const id of [ ...strings.keys() ].sort()) {
	out += '\n' + [ ...new Set(strings.get(id)) ].map((w) => `#: ${w}\n`).join('');
	out += `msgid ${po(id)}\nmsgstr ""\n`;
}

if (process.argv[2] === '--check') {
	const have = fs.existsSync(pot) ? fs.readFileSync(pot, 'utf8') : '';
	if (have !== out) {
		console.error(`${pot} is not up to date: node tests/luci/i18n-scan.js > ${path.relative(root, pot)}`);
		process.exit(1);
	}
	console.log(`ok - ${path.relative(root, pot)} holds the ${strings.size} strings of the views and the menu`);
}
else {
	process.stdout.write(out);
}
