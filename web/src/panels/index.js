// Panels of the bundled plugins, by the name a plugin is installed as. Each
// module exports `render(box, ctx)`, called every refresh of the Plugins view
// (about every 2 s) with its own container `box` (above the plugin's generic
// charts and decisions) and ctx = { name, get, call, el, feed, TimeChart }.
// A panel reads the plugin's own routes (`/api/plugins/<name>/...`) and its
// series from `feed`; it updates what it drew instead of redrawing everything.
//
// Add a plugin's panel as one line here: `import * as x from './x.js'` and an
// entry in `custom`.
import * as paramserver from './paramserver.js';
import * as clockwork from './clockwork.js';
import * as dlrover from './dlrover.js';
import * as mpi from './mpi.js';
import * as bottleneck from './bottleneck.js';

export const custom = { bottleneck, clockwork, dlrover, mpi, paramserver };
