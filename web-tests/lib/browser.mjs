// Shared Chromium helpers for the browser tests: one headless Debian Chromium
// per test file, a fresh context (own localStorage) per page.

import { after, before } from 'node:test';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
export const TIMEOUT = 10000;

let browser;

/** Registers before/after hooks that launch and close the browser for this file. */
export function useBrowser() {
  before(async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      timeout: 30000,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });
  after(async () => {
    await browser?.close();
  });
}

/**
 * A fresh browser context and page, signed in with `token` if given (seeded
 * into localStorage once); page errors are collected in `page.pageErrors`.
 */
export async function openPage(onCleanup, { token, baseUrl, viewport = { width: 900, height: 640 } } = {}) {
  const context = await browser.newContext({ viewport });
  onCleanup(() => context.close());
  context.setDefaultTimeout(TIMEOUT);
  if (token) {
    await context.addInitScript(
      ({ t, origin }) => {
        if (location.origin === origin && !sessionStorage.getItem('margin.test.seeded')) {
          localStorage.setItem('margin.token', t);
          sessionStorage.setItem('margin.test.seeded', '1');
        }
      },
      { t: token, origin: baseUrl },
    );
  }
  const page = await context.newPage();
  page.pageErrors = [];
  page.on('pageerror', (e) => page.pageErrors.push(e.message));
  return page;
}

/** Trimmed textContent of the first match. */
export async function text(page, selector) {
  return (await page.locator(selector).textContent())?.trim();
}
