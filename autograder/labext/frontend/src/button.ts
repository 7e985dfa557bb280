/**
 * The "Check my work" button in the toolbar of assignment notebooks: those whose cells
 * carry nbgrader grade ids or whose metadata names an assignment.
 */
import { DocumentRegistry, DocumentWidget } from '@jupyterlab/docregistry';
import { IDisposable } from '@lumino/disposable';
import { Widget } from '@lumino/widgets';

import { Checker, ICheckEvent } from './checker';
import { checkIcon } from './icons';

export class CheckButton extends Widget {
  constructor(
    private readonly panel: DocumentWidget,
    private readonly checker: Checker
  ) {
    super({ node: document.createElement('div') });
    this.addClass('jp-ToolbarButton');
    this.addClass('tc-CheckButton');
    const button = document.createElement('button');
    button.className = 'jp-ToolbarButtonComponent jp-mod-minimal jp-Button';
    button.title = 'Grade your saved notebook with the hidden checks (records nothing)';
    button.setAttribute('data-command', 'transformers-course:check');
    this.icon = document.createElement('span');
    checkIcon.element({ container: this.icon });
    this.icon.classList.add('jp-ToolbarButtonComponent-icon', 'tc-buttonIcon');
    this.label = document.createElement('span');
    this.label.className = 'jp-ToolbarButtonComponent-label';
    this.label.textContent = 'Check my work';
    button.append(this.icon, this.label);
    button.onclick = () => void this.checker.check(this.panel.context.path);
    this.button = button;
    this.node.append(button);
    checker.changed.connect(this.update_, this);
  }

  dispose(): void {
    this.checker.changed.disconnect(this.update_, this);
    super.dispose();
  }

  private update_(_: Checker, event: ICheckEvent): void {
    const mine = event.path === this.panel.context.path;
    const busy = event.state === 'checking';
    this.button.disabled = busy;
    this.node.classList.toggle('tc-mod-checking', busy && mine);
    this.label.textContent = busy && mine ? 'Checking…' : 'Check my work';
  }

  private button: HTMLButtonElement;
  private icon: HTMLSpanElement;
  private label: HTMLSpanElement;
}

export class CheckButtonExtension implements DocumentRegistry.WidgetExtension {
  constructor(private readonly checker: Checker) {}

  createNew(widget: Widget, context: DocumentRegistry.Context): IDisposable {
    const panel = widget as DocumentWidget;
    const button = new CheckButton(panel, this.checker);
    button.hide();
    panel.toolbar.insertItem(10, 'checkMyWork', button);
    void context.ready.then(() => {
      if (isAssignment(context)) {
        button.show();
      }
    });
    return button;
  }
}

function isAssignment(context: DocumentRegistry.Context): boolean {
  const model = context.model as any;
  if (model.getMetadata?.('autograder')?.assignment) {
    return true;
  }
  const cells = model.cells;
  for (let i = 0; i < (cells?.length ?? 0); i++) {
    const meta = cells.get(i).getMetadata?.('nbgrader');
    if (meta && typeof meta.grade_id === 'string') {
      return true;
    }
  }
  return false;
}
