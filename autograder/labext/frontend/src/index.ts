/**
 * The course inside JupyterLab: a Course panel in the left side bar, and a
 * "Check my work" button on assignment notebooks that grades the saved notebook with the
 * autograder's hidden checks (server side: autograder/labext).
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { DocumentWidget } from '@jupyterlab/docregistry';

import { CheckButtonExtension } from './button';
import { Checker } from './checker';
import { checkIcon } from './icons';
import { CoursePanel } from './panel';
import { guardSubmit } from './submit';

const CHECK = 'transformers-course:check';
const SHOW = 'transformers-course:show-panel';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'transformers-course-lab:plugin',
  description: 'The Course panel and "Check my work".',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ) => {
    const checker = new Checker(app);
    const panel = new CoursePanel(app, checker);
    app.shell.add(panel, 'left', { rank: 150 });
    restorer?.add(panel, panel.id);
    app.docRegistry.addWidgetExtension('Notebook', new CheckButtonExtension(checker));
    // nbgrader's Assignment List: ask before submitting unwritten or unchecked work.
    guardSubmit();

    // After a check, show its result in the panel.
    checker.changed.connect((_, event) => {
      if (event.state !== 'checking') {
        app.shell.activateById(panel.id);
      }
    });

    app.commands.addCommand(SHOW, {
      label: 'Show the Course panel',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CHECK, {
      label: 'Check my work',
      caption: 'Grade the saved notebook with the hidden checks (records nothing)',
      icon: checkIcon,
      isEnabled: () =>
        app.shell.currentWidget instanceof DocumentWidget && checker.running === null,
      execute: async () => {
        const widget = app.shell.currentWidget;
        if (widget instanceof DocumentWidget && widget.context.path.endsWith('.ipynb')) {
          await checker.check(widget.context.path);
        }
      }
    });
    palette?.addItem({ command: CHECK, category: 'Course' });
    palette?.addItem({ command: SHOW, category: 'Course' });
  }
};

export default plugin;
