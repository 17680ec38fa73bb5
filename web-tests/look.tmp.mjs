import { chromium } from 'playwright-core';
const token = process.argv[2];
const base = 'http://127.0.0.1:7171';
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox','--disable-gpu','--disable-background-networking'] });
for (const [w, h, name] of [[1366, 900, 'wide'], [900, 700, 'narrow'], [420, 800, 'phone']]) {
  const ctx = await browser.newContext({ viewport: { width: w, height: h } });
  await ctx.addInitScript((t) => localStorage.setItem('margin.token', t), token);
  const page = await ctx.newPage();
  await page.goto(base + '/');
  await page.locator('#doc-list li a').first().waitFor();
  if (name === 'wide') {
    await page.locator('#new-doc-title').fill('Empty plan');
    await page.locator('#new-doc').click();
    await page.locator('#editor .ProseMirror').waitFor();
    await page.waitForTimeout(500);
    await page.screenshot({ path: `/tmp/explore/empty-${name}.png` });
    await page.goto(base + '/');
    await page.locator('#doc-list li a').first().waitFor();
    await page.screenshot({ path: `/tmp/explore/home-${name}.png` });
  }
  await page.locator('#doc-list li a', { hasText: 'Beta' }).click();
  await page.locator('#editor .ProseMirror').waitFor();
  if (name === 'wide') {
    await page.locator('#chat-input').fill('@planner please review');
    await page.locator('#chat-send').click();
  }
  await page.locator('.decision-card').first().waitFor();
  await page.waitForTimeout(800);
  await page.screenshot({ path: `/tmp/explore/doc-${name}.png`, fullPage: true });
  await ctx.close();
}
await browser.close();
