// eslint for the luci-app-nodeportd views (tests/luci/run.sh). A LuCI view is the body of
// a function LuCI's loader builds: a top-level `return`, and the globals LuCI provides.
'use strict';

const js = require('@eslint/js');

module.exports = [
	js.configs.recommended,
	{
		files: [ '**/*.js' ],
		languageOptions: {
			ecmaVersion: 2020,
			sourceType: 'script',
			parserOptions: { ecmaFeatures: { globalReturn: true } },
			globals: {
				// LuCI's globals (luci.js, cbi.js)
				L: 'readonly', E: 'readonly', _: 'readonly', N_: 'readonly',
				// the modules the views `'require`
				view: 'readonly', dom: 'readonly', poll: 'readonly', rpc: 'readonly', ui: 'readonly',
				uci: 'readonly', form: 'readonly',
				// the browser
				document: 'readonly', window: 'readonly'
			}
		},
		rules: {
			'no-unused-vars': [ 'error', { args: 'none' } ],
			'no-implicit-globals': 'error',
			'no-var': 'error',
			'prefer-const': 'error',
			'eqeqeq': [ 'error', 'smart' ]
		}
	},
	{
		// The tests themselves: node scripts, and the harness that runs in the browser.
		files: [ 'tests/luci/*.js' ],
		languageOptions: {
			ecmaVersion: 2022,
			sourceType: 'commonjs',
			globals: {
				require: 'readonly', module: 'writable', process: 'readonly', __dirname: 'readonly', console: 'readonly',
				setTimeout: 'readonly', URL: 'readonly', URLSearchParams: 'readonly', fetch: 'readonly',
				window: 'readonly', document: 'readonly', location: 'readonly'
			}
		},
		rules: { 'no-unused-vars': [ 'error', { args: 'none', caughtErrors: 'none' } ] }
	}
];
