// The console's one page shell: the address says which page module draws into it.
import { applyTheme, loadAccess } from "./core.js";

const ROUTES = [
  [/^\/$/, "overview"],
  [/^\/ui\/runs\/?$/, "runs"],
  [/^\/ui\/runs\/(.+)$/, "run"],
  [/^\/ui\/lanes\/?$/, "lanes"],
  [/^\/ui\/schedules\/?$/, "schedules"],
  [/^\/ui\/engines\/?$/, "engines"],
];

applyTheme();
await loadAccess();
for (const [pattern, name] of ROUTES) {
  const match = location.pathname.match(pattern);
  if (match) {
    const page = await import(`./pages/${name}.js`);
    page.default(match[1] ? decodeURIComponent(match[1]) : undefined);
    break;
  }
}
