import { LabIcon } from '@jupyterlab/ui-components';

/** A mortarboard: the Course panel's tab in the left side bar. */
export const courseIcon = new LabIcon({
  name: 'transformers-course:course',
  svgstr: `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 3 1 8.5 12 14l9-4.5V16h2V8.5L12 3z"/>
    <path d="M5 12.2v4.1C5 18.4 8.1 20 12 20s7-1.6 7-3.7v-4.1L12 15.7 5 12.2z"/>
  </g>
</svg>`
});

/** A check mark in a circle: the "Check my work" button. */
export const checkIcon = new LabIcon({
  name: 'transformers-course:check',
  svgstr: `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 2a10 10 0 1 0 0 20 10 10 0 0 0 0-20zm-1.6 14.6-4.3-4.3 1.4-1.4 2.9 2.9 6.1-6.1 1.4 1.4-7.5 7.5z"/>
  </g>
</svg>`
});
