/**
 * Open a notebook and bring one graded cell (by its nbgrader grade_id) into view.
 *
 * Only the few members of JupyterLab's Notebook used here are named, so the extension
 * does not depend on the notebook package itself.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { DocumentWidget } from '@jupyterlab/docregistry';

interface ICellLike {
  node: HTMLElement;
  model: { getMetadata(key: string): any };
}

interface INotebookLike {
  node: HTMLElement;
  widgets: ReadonlyArray<ICellLike>;
  activeCellIndex: number;
  mode: string;
  scrollToItem?(index: number, align?: string, margin?: number): Promise<void>;
}

export function gradeId(cell: ICellLike): string | undefined {
  const meta = cell.model.getMetadata('nbgrader');
  return meta && typeof meta.grade_id === 'string' ? meta.grade_id : undefined;
}

function nbgrader(cell: ICellLike): any {
  return cell.model.getMetadata('nbgrader') || {};
}

/** The cell the student writes in for the graded cell at ``index``: that cell itself
 *  when it is an answer (a written question), else the nearest answer cell above it
 *  after the previous graded cell; the graded cell when there is none. */
export function answerCellIndex(cells: ReadonlyArray<ICellLike>, index: number): number {
  if (nbgrader(cells[index]).solution) {
    return index;
  }
  for (let i = index - 1; i >= 0; i--) {
    const meta = nbgrader(cells[i]);
    if (meta.solution) {
      return i;
    }
    if (meta.grade) {
      break;
    }
  }
  return index;
}

export async function revealExercise(
  app: JupyterFrontEnd,
  path: string,
  exercise: string
): Promise<void> {
  const widget = (await app.commands.execute('docmanager:open', { path })) as DocumentWidget;
  if (!widget) {
    return;
  }
  await widget.context.ready;
  await widget.revealed;
  app.shell.activateById(widget.id);
  const notebook = widget.content as unknown as INotebookLike;
  const graded = notebook.widgets.findIndex(cell => gradeId(cell) === exercise);
  if (graded < 0) {
    return;
  }
  const index = answerCellIndex(notebook.widgets, graded);
  notebook.mode = 'command';
  notebook.activeCellIndex = index;
  // JupyterLab 4's notebook scrolls by alignment ('start'), drawing the cell if it was
  // windowed out; the element's own scrollIntoView then settles it.
  if (notebook.scrollToItem) {
    try {
      await notebook.scrollToItem(index, 'start', 0);
    } catch {
      // an older notebook widget: scrollIntoView below does it
    }
  }
  const node = notebook.widgets[index].node;
  if (node.isConnected) {
    node.scrollIntoView({ block: 'start' });
  }
  notebook.node.focus();
  node.classList.add('tc-flash');
  window.setTimeout(() => node.classList.remove('tc-flash'), 1600);
}
