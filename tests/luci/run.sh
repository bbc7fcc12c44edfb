#!/usr/bin/env bash
# luci-app-nodeportd (openwrt-package/luci-app-nodeportd), part of tests/run.sh:
#   node --check and eslint on the views; the menu, the ACL and the ubus object refer to
#   each other (check-refs.js); the views in headless chromium on a test harness (not
#   LuCI), fed by a real nodeportd (test.js, root: the daemon gets a network namespace);
#   the .ipk/.apk of build-luci-app.sh (package.sh).
# Needs node, /usr/bin/chromium and the npm packages of package.json (.ci/run installs
# them; without node_modules this runs `npm ci` here). Screenshots: target/luci-screenshots.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
views="$root/openwrt-package/luci-app-nodeportd/htdocs/luci-static/resources/view"

cd "$here"
if [ ! -x node_modules/.bin/eslint ] || [ ! -d node_modules/playwright-core ]; then
	npm ci --no-audit --no-fund
fi

for f in "$views"/nodeportd/*.js; do
	node --check "$f"
done
echo "ok - node --check on the views"
# eslint lints files under its working directory only: run it from the root.
(cd "$root" && "$here/node_modules/.bin/eslint" -c "$here/eslint.config.js" --max-warnings 0 "$views" tests/luci/*.js)
echo "ok - eslint on the views and on these tests"

node check-refs.js
node i18n-scan.js --check
"$here/package.sh"

bin=${NODEPORTD_BIN:-$root/target/debug/nodeportd}
if [ ! -x "$bin" ]; then
	(cd "$root" && nice -n 10 cargo build --bin nodeportd)
fi
NODEPORTD_BIN=$bin node test.js
