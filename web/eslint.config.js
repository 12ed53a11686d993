// ESLint (flat config) for the dashboard; `./dev check` runs it.
// The recommended set catches real mistakes (undefined names, unused
// variables, unreachable code); the few rules added below keep the style
// the sources already follow. Formatting is left alone.
import js from '@eslint/js';
import globals from 'globals';

export default [
  { ignores: ['dist/', 'node_modules/'] },
  js.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2022, sourceType: 'module' },
    rules: {
      'no-unused-vars': ['error', { args: 'after-used', argsIgnorePattern: '^_' }],
      eqeqeq: ['error', 'smart'],
      'no-var': 'error',
      'prefer-const': ['error', { destructuring: 'all' }],
    },
  },
  // The page runs in the browser.
  { files: ['src/**/*.js'], languageOptions: { globals: globals.browser } },
  // The build script and the browser tests run in Node; the tests also hand
  // functions to page.evaluate, which run in the page.
  { files: ['*.mjs', 'tests/**/*.mjs', 'bench/**/*.mjs'], languageOptions: { globals: { ...globals.node, ...globals.browser } } },
];
